package version

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestStringNamesTheReleaseThenTheCommit(t *testing.T) {
	defer func(v, c string) { Version, Commit = v, c }(Version, Commit)
	assert.Equal(t, AppVersion, Version, "unstamped builds (go install) are the release, never \"dev\"")

	Commit = "0123456789abcdef0123456789abcdef01234567"
	assert.Equal(t, AppVersion+" (commit 0123456789ab)", String(), "a full hash is shortened")
	Commit = "0123456789ab-dirty"
	assert.Equal(t, AppVersion+" (commit 0123456789ab-dirty)", String(), "make's stamp is printed as is")
	Version = "0.1.0-patched"
	assert.Equal(t, "0.1.0-patched (commit 0123456789ab-dirty)", String())
}
