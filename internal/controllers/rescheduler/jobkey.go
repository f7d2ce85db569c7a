package rescheduler

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"

	"github.com/trainguard/trainguard/internal/foundations/contract"
	"github.com/trainguard/trainguard/internal/jobs"
)

// RecordName is the name of the job's bad-node ConfigMap in trainguard's
// namespace. A hash of the full identity (namespace included) keeps jobs of
// different namespaces and kinds (or a bare pod and a job) with the same
// name apart, and keeps the name valid whatever its length; the readable
// part is for humans only.
func RecordName(k jobs.Key) string {
	sum := sha256.Sum256([]byte(k.String()))
	suffix := hex.EncodeToString(sum[:])[:16]
	name := strings.ToLower(k.Namespace + "." + k.Name)
	const maxName = 253 - len(recordPrefix) - 1 - 16
	if len(name) > maxName {
		name = strings.TrimRight(name[:maxName], "-.")
	}
	return recordPrefix + name + "-" + suffix
}

const recordPrefix = contract.BadNodeRecordPrefix
