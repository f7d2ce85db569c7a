// Package admissionio is the generic JSON machinery of admission, with no
// knowledge of trainguard's kinds or injections: the codec admitted objects
// and AdmissionReviews are read with, the typed diff that turns a mutated
// object into a JSON patch against the user's raw bytes, the raw-path
// scanner the diff consults, and JSON pointers. The webhook decodes, scopes,
// resolves the policy, calls the mutators and diffs with it; fuzz targets
// and their seeds live here with the code they exercise.
package admissionio
