package agent

import (
	"context"
	"errors"
	"os"
	"strconv"
	"time"
)

// ackPollInterval is how often the agent looks for the ack: reading one
// small file every 5 ms costs nothing next to a checkpoint, and a coarser
// tick would add up to its length to every preStop.
const ackPollInterval = 5 * time.Millisecond

// ckptResult is the checkpoint step's outcome: the exit code, and the step
// and size the trainer acknowledged (0 when it did not).
type ckptResult struct {
	code  int
	step  int64
	bytes int64
	// req is the request written (nil when none was), sig the signal dir it
	// was written in, kept open for done.json; close() releases it.
	req *Request
	sig *dirFD
}

func (r ckptResult) close() { r.sig.close() }

// requestCheckpoint is the agent's half of the protocol: find a live
// trainer, write a request with a fresh generation and nonce, and wait for
// the ack of exactly that request. It never outlives ctx. ckpt is the
// checkpoint directory, opened once (nil with ckptErr when it could not be).
func requestCheckpoint(ctx context.Context, cfg prestopConfig, ckpt *dirFD, ckptErr error, log *eventLog) ckptResult {
	if ckpt == nil && errors.Is(ckptErr, os.ErrNotExist) {
		// The trainer creates the job's directory when it starts listening.
		log.printf("no trainer listening: checkpoint dir %s does not exist", cfg.checkpointDir)
		return ckptResult{code: ExitNoTrainer}
	}
	if ckpt == nil {
		log.printf("refusing the checkpoint dir: %v", ckptErr)
		return ckptResult{code: ExitIO}
	}
	sig, err := openSignalDir(ckpt, cfg.checkpointDir, cfg.signalDir)
	if err != nil {
		log.printf("refusing the signal dir: %v", err)
		return ckptResult{code: ExitIO}
	}
	res := requestAndWait(ctx, cfg, sig, log)
	if res.req == nil {
		sig.close()
		return res
	}
	res.sig = sig
	if res.code == ExitTimeout || res.code == ExitTrainerGone {
		expireRequest(sig, *res.req, log)
	}
	return res
}

// expireRequest rewrites an unanswered request with its deadline moved to
// now: the agent no longer waits for it, and a trainer that starts after
// this (the container restarted in the same pod) must not save and hold for
// a request its predecessor left. A trainer still working on it may still
// answer; that does no harm.
func expireRequest(sig *dirFD, req Request, log *eventLog) {
	req.Deadline = unixSeconds(time.Now())
	req.Expired = true
	if err := writeJSONAtomic(sig, requestFile, req); err != nil {
		log.printf("cannot expire request generation %d (a restarted trainer may still answer it): %v", req.Generation, err)
		return
	}
	log.printf("expired request generation %d: no trainer will answer it now", req.Generation)
}

// signalDone tells the trainer that acknowledged (or still works on) the
// request that the hook is over: the outcome is written, so the trainer may
// exit. It is the last thing the agent does.
func signalDone(res ckptResult, log *eventLog) {
	if res.req == nil || res.sig == nil {
		return
	}
	d := Done{Generation: res.req.Generation, Nonce: res.req.Nonce, Outcome: outcomeOf(res.code),
		ExitCode: res.code, DoneAt: unixSeconds(time.Now())}
	if err := writeJSONAtomic(res.sig, doneFile, d); err != nil {
		log.printf("cannot write %s (the trainer exits after its own bound instead): %v", doneFile, err)
	}
}

// requestAndWait runs the protocol in the opened signal dir: every file is
// reached through sig, never by path.
func requestAndWait(ctx context.Context, cfg prestopConfig, sig *dirFD, log *eventLog) ckptResult {
	hb, ok := waitForHeartbeat(ctx, cfg, sig)
	if !ok {
		log.printf("no trainer listening: no heartbeat newer than %s in %s after waiting %s%s",
			cfg.heartbeatAge, cfg.signalDir, cfg.heartbeatWait, describeHeartbeat(sig))
		return ckptResult{code: ExitNoTrainer}
	}
	nonce, err := newNonce()
	if err != nil {
		log.printf("cannot make a request nonce: %v", err)
		return ckptResult{code: ExitIO}
	}
	deadline, _ := ctx.Deadline()
	req := Request{
		Generation:  nextGeneration(sig),
		Nonce:       nonce,
		Pod:         cfg.pod,
		PodUID:      cfg.podUID,
		RequestedAt: unixSeconds(time.Now()),
		Deadline:    unixSeconds(deadline),
		AgentPID:    os.Getpid(),
	}
	if err := writeJSONAtomic(sig, requestFile, req); err != nil {
		log.printf("cannot write checkpoint request: %v", err)
		return ckptResult{code: ExitIO}
	}
	log.printf("saving ckpts: requested generation %d (trainer pid %d at step %d)", req.Generation, hb.PID, hb.Step)
	res := waitForAck(ctx, cfg, sig, req, log)
	res.req = &req
	return res
}

// waitForHeartbeat returns the trainer's heartbeat once one is fresh, or
// false after heartbeatWait: with no trainer, the hook must not sit out its
// whole timeout while the pod could already be gone.
func waitForHeartbeat(ctx context.Context, cfg prestopConfig, sig *dirFD) (Heartbeat, bool) {
	give := time.Now().Add(cfg.heartbeatWait)
	for {
		var hb Heartbeat
		err := readJSON(sig, heartbeatFile, &hb)
		if err == nil && hb.fresh(time.Now(), cfg.heartbeatAge) && pidAlive(hb.PID) {
			return hb, true
		}
		if !time.Now().Before(give) || !sleepCtx(ctx, pollInterval) {
			return hb, false
		}
	}
}

func waitForAck(ctx context.Context, cfg prestopConfig, sig *dirFD, req Request, log *eventLog) ckptResult {
	start := time.Now()
	var staleLogged, forgedLogged, hungLogged bool
	for {
		var ack Ack
		err := readJSON(sig, ackFile, &ack)
		switch {
		case err == nil && ack.Generation == req.Generation && ack.Nonce == req.Nonce:
			return judgeAck(ack, time.Since(start), log)
		case err == nil && ack.Generation == req.Generation && !forgedLogged:
			forgedLogged = true
			log.printf("ignoring acknowledgement of generation %d without this request's nonce: not written for this request", ack.Generation)
		case err == nil && ack.Generation != req.Generation && !staleLogged:
			staleLogged = true
			log.printf("ignoring acknowledgement of generation %d: waiting for generation %d", ack.Generation, req.Generation)
		case err != nil && !errors.Is(err, os.ErrNotExist) && !staleLogged:
			// Acks are written atomically, so this is a foreign or damaged file, not a torn write.
			staleLogged = true
			log.printf("ignoring unreadable acknowledgement: %v", err)
		}
		var hb Heartbeat
		hbErr := readJSON(sig, heartbeatFile, &hb)
		if hbErr == nil && hb.age(time.Now()) > cfg.heartbeatAge {
			if !pidAlive(hb.PID) {
				log.printf("trainer exited (pid %d, last heartbeat %s ago, state %s) before acknowledging generation %d",
					hb.PID, hb.age(time.Now()).Round(time.Millisecond), hb.State, req.Generation)
				return ckptResult{code: ExitTrainerGone}
			}
			if !hungLogged {
				hungLogged = true
				log.printf("trainer heartbeat stale (%s) but pid %d alive: busy or hung, still waiting", hb.age(time.Now()).Round(time.Millisecond), hb.PID)
			}
		}
		if !sleepCtx(ctx, ackPollInterval) {
			log.printf("timeout: no acknowledgement of generation %d after %s (trainer state %q at step %d); the trainer is hung or never reached a safe point (migrator.step())",
				req.Generation, time.Since(start).Round(time.Millisecond), hb.State, hb.Step)
			return ckptResult{code: ExitTimeout, step: hb.Step}
		}
	}
}

func judgeAck(ack Ack, took time.Duration, log *eventLog) ckptResult {
	if ack.Status == "ok" {
		log.printf("finish ckpts: generation %d acknowledged after %s, step %d, checkpoint %s (%d bytes)",
			ack.Generation, took.Round(time.Millisecond), ack.Step, ack.Checkpoint, ack.Bytes)
		return ckptResult{code: ExitOK, step: ack.Step, bytes: ack.Bytes}
	}
	log.printf("trainer failed to checkpoint generation %d (status %q): %s", ack.Generation, ack.Status, ack.Error)
	return ckptResult{code: ExitTrainerFailed, step: ack.Step}
}

// describeHeartbeat adds what is known about a stale heartbeat to the log line.
func describeHeartbeat(sig *dirFD) string {
	var hb Heartbeat
	if err := readJSON(sig, heartbeatFile, &hb); err != nil {
		return " (no heartbeat file)"
	}
	if age := hb.age(time.Now()); age < -maxClockSkew {
		return " (heartbeat dated " + (-age).Round(time.Millisecond).String() + " in the future: forged or corrupt, not fresh; pid " + strconv.Itoa(hb.PID) + ")"
	}
	return " (last heartbeat " + hb.age(time.Now()).Round(time.Millisecond).String() + " old, pid " + strconv.Itoa(hb.PID) + ")"
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
