// Package apis holds local, partial Go types for the third-party training
// jobs trainguard handles. They declare only the fields trainguard reads or
// writes; unknown fields survive because trainguard never re-serialises these
// types over the user's object: it sends a JSON patch computed from them.
package apis
