// Package kube is sbx kube as a library: sandboxes on a Kubernetes
// cluster, with the same two layers as sbx run (docs/kubernetes.md). Its
// image.go writes the image archive of sbx itself that the cluster's
// gateway pods run (WriteImage, WriteImageFile).
package kube
