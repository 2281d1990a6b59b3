// Package kube runs sbx sandboxes on a Kubernetes cluster (sbx kube,
// docs/kubernetes.md): the objects of a sandbox, the client-go calls that
// make, list, follow and remove them, and the image archive of sbx itself
// that the gateway pods run (WriteImage, WriteImageFile).
//
// A sandbox is an agent pod whose only way out is a gateway pod, in two
// layers: rules inside the agent pod, installed by an init container
// (package podnet), send every TCP connection and DNS query to the
// gateway, and a NetworkPolicy lets the agent pod reach its gateway pod
// and nothing else. The gateway pod runs sbx gateway with the sandbox's
// policy (a ConfigMap) and CA and API token (a Secret) and writes the
// decision log to its standard output. The ConfigMap owns every other
// object, so deleting it deletes the sandbox; all carry the label
// sbx.dev/sandbox=<id>.
//
// MakeObjects and AgentPod only build objects (tested without a cluster);
// Cluster makes them on one.
package kube
