// Separate module so go-containerregistry stays out of trainguard's go.mod.
// hack/cluster/images.sh and hack/image.sh use it.
module github.com/trainguard/trainguard/hack/tools/ocimage

go 1.26.0

require github.com/google/go-containerregistry v0.22.1

require (
	github.com/klauspost/compress v1.19.2 // indirect
	github.com/opencontainers/go-digest v1.0.0 // indirect
	github.com/opencontainers/image-spec v1.1.1 // indirect
)
