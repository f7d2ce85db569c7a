package chart

import (
	"os/exec"
	"testing"

	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
)

// TestDeploymentArgsAreAcceptedByServe renders every value combination and
// hands the container's exact command line to the real `trainguard serve`
// (with --help, so it parses its flags and stops): a flag the chart passes
// but the binary does not know would crash-loop every install.
func TestDeploymentArgsAreAcceptedByServe(t *testing.T) {
	helm, dir := helmAndChart(t)
	bin := buildTrainguard(t)

	for _, tc := range cases() {
		t.Run(tc.name, func(t *testing.T) {
			objs, err := Render(helm, dir, tc.release, tc.namespace, tc.set...)
			require.NoError(t, err)
			deployments := OfKind(objs, "Deployment")
			require.Len(t, deployments, 1)
			var d appsv1.Deployment
			require.NoError(t, Into(deployments[0], &d))
			c := d.Spec.Template.Spec.Containers[0]
			require.Equal(t, []string{"/trainguard"}, c.Command)
			args := append(append([]string{}, c.Args...), "--help")
			out, err := exec.Command(bin, args...).CombinedOutput()
			require.NoError(t, err, "trainguard refuses the chart's arguments %v:\n%s", c.Args, out)
		})
	}
}
