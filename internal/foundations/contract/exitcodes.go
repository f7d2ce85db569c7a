package contract

// ExitPeerLost is the exit code of a rank whose collective failed because a
// peer disappeared (gloo "Connection closed/reset by peer", a collective
// timeout, a NCCL error naming a remote rank): the SDK ends that rank with
// it, never with 1, so a peer's death is never a permanent failure. It is
// 128+SIGUSR1: kubeflow's ExitCode restart policy treats every code >= 128
// as retryable, and the rescheduler's exit-code table already lists 138 as
// user-retryable. The SDK spells it again (sdk/python/trainguard/_peer.py,
// EXIT_PEER_LOST); TestExitPeerLostIsTheSDKs ties the two.
const ExitPeerLost = 138
