package checkpoint_test

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/trainguard/trainguard/internal/foundations/contract"
	"github.com/trainguard/trainguard/internal/foundations/trainerstatus"
)

// nowFile is where a pod's status server files a checkpoint-now request
// (sdk/python/trainguard/_protocol.py NOW_FILE).
const nowFile = "checkpoint-now.json"

// TestCheckpointNow: a 2-rank job (two pods of one process each, real
// PyTorch, gloo) without periodic checkpoints is asked, through the
// controller's own requester, on the port of the pod that is NOT global
// rank 0, to checkpoint now. Rank 0 commits a step at or after the one
// acknowledged within a few steps, both ranks train on in the same
// processes, and the checkpoint loads; a second request inside the interval
// is 429, a garbage and an oversized body are 400, and none of them writes
// anything. Replicated (DDP) and sharded (ZeroRedundancyOptimizer) state:
// there every rank writes its part at the step rank 0 decides.
func TestCheckpointNow(t *testing.T) {
	for _, sharded := range []bool{false, true} {
		name, extra := "replicated", []string(nil)
		if sharded {
			name, extra = "sharded", []string{"--zero"}
		}
		t.Run(name, func(t *testing.T) { checkpointNow(t, extra) })
	}
}

func checkpointNow(t *testing.T, extra []string) {
	job := newRankPods(t)
	var ports [2]int
	var ranks [2]*proc
	args := append([]string{"--steps", "100000", "--step-delay", "0.05"}, extra...)
	for rank, p := range job.pods {
		ports[rank] = freePort(t)
		ranks[rank] = startTrainer(t, p, []string{"OMP_NUM_THREADS=1", "WORLD_SIZE=2", "RANK=" + strconv.Itoa(rank),
			"LOCAL_RANK=0", "MASTER_ADDR=127.0.0.1", "MASTER_PORT=" + strconv.Itoa(job.port),
			"TRAINGUARD_STATUS_PORT=" + strconv.Itoa(ports[rank])}, args...)
	}
	ranks[1].waitFor(`rank 1: completed step 10 `, 180*time.Second)
	pids := [2]int{trainerPid(t, job.pods[0]), trainerPid(t, job.pods[1])}

	// The pod network: the worker's pod IP at StatusPort is its local port.
	const workerIP = "192.0.2.2"
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		if addr != net.JoinHostPort(workerIP, strconv.Itoa(contract.StatusPort)) {
			return nil, fmt.Errorf("no pod at %s", addr)
		}
		return (&net.Dialer{}).DialContext(ctx, network, "127.0.0.1:"+strconv.Itoa(ports[1]))
	}
	request, fetch := trainerstatus.HTTPRequesterVia(dial), trainerstatus.HTTPFetcherVia(dial)
	ctx := context.Background()
	asked := time.Now()
	ack, err := request(ctx, workerIP, "node node-a: MaintenancePlanned")
	require.NoError(t, err)
	require.Positive(t, ack.Step)
	var st trainerstatus.Status
	require.Eventually(t, func() bool {
		st, err = fetch(ctx, workerIP)
		return err == nil && st.CommittedStep != nil && *st.CommittedStep >= ack.Step
	}, 30*time.Second, 20*time.Millisecond, "no commit of step %d or later", ack.Step)
	committed := *st.CommittedStep
	t.Logf("checkpoint-now acknowledged at step %d, committed step %d in %s", ack.Step, committed, time.Since(asked))
	assert.LessOrEqual(t, committed, ack.Step+3, "the next completed step, within a few steps")
	pointer := readJSONFile(t, filepath.Join(job.pods[0].ckptDir, "trainguard-latest.json"))
	require.EqualValues(t, committed, pointer["step"])
	filed, err := os.ReadFile(filepath.Join(job.pods[1].signalDir, nowFile))
	require.NoError(t, err)

	// Training goes on, in the same processes.
	ranks[1].waitFor(fmt.Sprintf(`rank 1: completed step %d `, committed+10), 60*time.Second)
	for rank := range ranks {
		select {
		case <-ranks[rank].done:
			t.Fatalf("rank %d exited after the checkpoint: %s", rank, ranks[rank].out.String())
		default:
		}
		assert.Equal(t, pids[rank], trainerPid(t, job.pods[rank]), "rank %d's trainer was replaced", rank)
	}

	// Inside the interval (30 s by default): refused, nothing written.
	_, err = request(ctx, workerIP, "again")
	require.ErrorIs(t, err, trainerstatus.ErrRateLimited)
	url := "http://127.0.0.1:" + strconv.Itoa(ports[1]) + contract.CheckpointNowPath
	for name, body := range map[string]string{"garbage": "\x00garbage", "oversized": `{"format":1,"reason":"` + strings.Repeat("x", 2000) + `"}`} {
		resp, err := http.Post(url, "application/json", bytes.NewReader([]byte(body)))
		if err == nil { // an oversized body may be cut off by the server's early answer and close
			_ = resp.Body.Close()
			assert.Equal(t, http.StatusBadRequest, resp.StatusCode, name)
		}
	}
	now, err := os.ReadFile(filepath.Join(job.pods[1].signalDir, nowFile))
	require.NoError(t, err)
	assert.Equal(t, string(filed), string(now), "a refused request filed something")
	ranks[1].waitFor(fmt.Sprintf(`rank 1: completed step %d `, committed+20), 60*time.Second)
	assert.Equal(t, pointer, readJSONFile(t, filepath.Join(job.pods[0].ckptDir, "trainguard-latest.json")),
		"a refused request was committed")

	// The checkpoint loads: rank 0 killed first, so no dying gasp moves the pointer.
	ranks[0].signal(syscall.SIGKILL)
	ranks[1].signal(syscall.SIGKILL)
	for _, r := range ranks {
		_ = r.wait(60 * time.Second)
	}
	job.port = freePort(t)
	next := job.start(t, append([]string{"--steps", strconv.FormatInt(committed+2, 10)}, extra...)...)
	for rank, r := range next {
		got := r.waitFor(strconv.Itoa(rank)+`: resumed from (\S+) at step (\d+)`, 120*time.Second)
		assert.Equal(t, pointer["file"], got[1], "rank %d", rank)
		assert.Equal(t, strconv.FormatInt(committed, 10), got[2], "rank %d", rank)
		require.NoError(t, r.wait(120*time.Second), r.out.String())
	}
}
