package agent

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"time"
)

// requestCheckpoint is the agent's half of the protocol: find a live
// trainer, write a request with a fresh generation, and wait for the ack of
// exactly that generation. It returns an exit code and never outlives ctx.
func requestCheckpoint(ctx context.Context, cfg prestopConfig, log *eventLog) int {
	if err := os.MkdirAll(cfg.signalDir, 0o755); err != nil {
		log.printf("cannot create signal dir: %v", err)
		return ExitIO
	}
	hb, ok := waitForHeartbeat(ctx, cfg)
	if !ok {
		log.printf("no trainer listening: no heartbeat newer than %s in %s after waiting %s%s",
			cfg.heartbeatAge, cfg.signalDir, cfg.heartbeatWait, describeHeartbeat(cfg.signalDir))
		return ExitNoTrainer
	}
	deadline, _ := ctx.Deadline()
	req := Request{
		Generation:  nextGeneration(cfg.signalDir),
		Pod:         cfg.pod,
		RequestedAt: unixSeconds(time.Now()),
		Deadline:    unixSeconds(deadline),
		AgentPID:    os.Getpid(),
	}
	if err := writeJSONAtomic(filepath.Join(cfg.signalDir, requestFile), req); err != nil {
		log.printf("cannot write checkpoint request: %v", err)
		return ExitIO
	}
	log.printf("saving ckpts: requested generation %d (trainer pid %d at step %d)", req.Generation, hb.PID, hb.Step)
	return waitForAck(ctx, cfg, req, log)
}

// waitForHeartbeat returns the trainer's heartbeat once one is fresh, or
// false after heartbeatWait: with no trainer, the hook must not sit out its
// whole timeout while the pod could already be gone.
func waitForHeartbeat(ctx context.Context, cfg prestopConfig) (Heartbeat, bool) {
	give := time.Now().Add(cfg.heartbeatWait)
	for {
		var hb Heartbeat
		err := readJSON(filepath.Join(cfg.signalDir, heartbeatFile), &hb)
		if err == nil && hb.age(time.Now()) <= cfg.heartbeatAge && pidAlive(hb.PID) {
			return hb, true
		}
		if !time.Now().Before(give) || !sleepCtx(ctx, pollInterval) {
			return hb, false
		}
	}
}

func waitForAck(ctx context.Context, cfg prestopConfig, req Request, log *eventLog) int {
	start := time.Now()
	var staleLogged, hungLogged bool
	for {
		var ack Ack
		err := readJSON(filepath.Join(cfg.signalDir, ackFile), &ack)
		switch {
		case err == nil && ack.Generation == req.Generation:
			return judgeAck(ack, time.Since(start), log)
		case err == nil && !staleLogged:
			staleLogged = true
			log.printf("ignoring acknowledgement of generation %d: waiting for generation %d", ack.Generation, req.Generation)
		case err != nil && !errors.Is(err, os.ErrNotExist) && !staleLogged:
			// Acks are written atomically, so this is a foreign or damaged file, not a torn write.
			staleLogged = true
			log.printf("ignoring unreadable acknowledgement: %v", err)
		}
		var hb Heartbeat
		hbErr := readJSON(filepath.Join(cfg.signalDir, heartbeatFile), &hb)
		if hbErr == nil && hb.age(time.Now()) > cfg.heartbeatAge {
			if !pidAlive(hb.PID) {
				log.printf("trainer exited (pid %d, last heartbeat %s ago, state %s) before acknowledging generation %d",
					hb.PID, hb.age(time.Now()).Round(time.Millisecond), hb.State, req.Generation)
				return ExitTrainerGone
			}
			if !hungLogged {
				hungLogged = true
				log.printf("trainer heartbeat stale (%s) but pid %d alive: busy or hung, still waiting", hb.age(time.Now()).Round(time.Millisecond), hb.PID)
			}
		}
		if !sleepCtx(ctx, pollInterval) {
			log.printf("timeout: no acknowledgement of generation %d after %s (trainer state %q at step %d); the trainer is hung or never reached a safe point (migrator.step())",
				req.Generation, time.Since(start).Round(time.Millisecond), hb.State, hb.Step)
			return ExitTimeout
		}
	}
}

func judgeAck(ack Ack, took time.Duration, log *eventLog) int {
	if ack.Status == "ok" {
		log.printf("finish ckpts: generation %d acknowledged after %s, step %d, checkpoint %s",
			ack.Generation, took.Round(time.Millisecond), ack.Step, ack.Checkpoint)
		return ExitOK
	}
	log.printf("trainer failed to checkpoint generation %d (status %q): %s", ack.Generation, ack.Status, ack.Error)
	return ExitTrainerFailed
}

// describeHeartbeat adds what is known about a stale heartbeat to the log line.
func describeHeartbeat(dir string) string {
	var hb Heartbeat
	if err := readJSON(filepath.Join(dir, heartbeatFile), &hb); err != nil {
		return " (no heartbeat file)"
	}
	return " (last heartbeat " + hb.age(time.Now()).Round(time.Millisecond).String() + " old, pid " + itoa(hb.PID) + ")"
}

// sleepCtx sleeps d or until ctx ends; false means ctx ended.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
