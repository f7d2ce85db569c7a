package version

// AppVersion is the release this source tree is: the Helm chart's
// appVersion and the tag of the image the chart deploys (a test keeps the
// two equal). Defaults that name trainguard's image, such as the injected
// agent's, are pinned to it, never to a moving tag like `latest`: a node
// pulling `latest` could run an agent from another release than the
// webhook that injected it.
const AppVersion = "0.1.0"

// ImageRepository is where trainguard's image is published.
const ImageRepository = "ghcr.io/trainguard/trainguard"

// Image is trainguard's image at AppVersion.
const Image = ImageRepository + ":" + AppVersion
