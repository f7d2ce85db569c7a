package webhook

import "github.com/trainguard/trainguard/internal/jobs"

// objectJSON reads AdmissionReviews with the one codec admitted objects are
// decoded with (jobs.Decode): case-sensitive, as the API server reads them.
var objectJSON = jobs.JSON() //nolint:gochecknoglobals // immutable codec shared with package jobs, like encoding/json's own type cache.
