// Package kube runs sbx sandboxes on a Kubernetes cluster (sbx kube,
// docs/kubernetes.md): the objects of a sandbox, the API calls that make,
// list, follow and remove them (through Client, client-go's REST client
// with a scheme of the two API groups sbx uses, not client-go's
// clientset, whose initialisation every sbx process would pay), and the
// image archive of sbx itself that the gateway pods run (WriteImage,
// WriteImageFile).
//
// A sandbox is an agent pod whose only way out is a gateway pod, in two
// layers: rules inside the agent pod, installed by an init container
// (package podnet), send every TCP connection and DNS query to the
// gateway, and a NetworkPolicy lets the agent pod reach its gateway pod
// and nothing else. The gateway pod runs sbx gateway with the sandbox's
// policy (a ConfigMap) and CA and API token (a Secret) and writes the
// decision log to its standard output. The ConfigMap owns every other
// object, so deleting it deletes the sandbox; all carry the label
// sbx.dev/sandbox=<id>. The agent container has sbx run's limits
// (Spec.Memory, CPUs, TmpSize; NodeDefaults are their defaults for the
// cluster), and the gateway pod requests and limits of its own. Once the
// agent pod has its address (WaitAgentIP), sbx kube run tells the gateway,
// through its management API (PUT /v1/clients), to serve that address
// alone.
//
// A detached sandbox has no sbx process watching it: Controller (sbx kube
// controller, a Deployment in the cluster) does, with client-go's
// informers over the namespace's labelled pods and ConfigMaps and a
// leader elected with a Lease (Elector, a small one of sbx's own over
// Client, with client-go's semantics: client-go's leaderelection would
// bring its clientsets into the binary). The leader ends a sandbox whose
// gateway pod is gone, renews a sandbox's CA before it expires (the same
// name and key in a new certificate, written to the Secret, which sbx
// gateway --ca reads again, and to the ConfigMap), and removes the
// objects of a sandbox that got no agent pod within a grace period (what
// an interrupted sbx kube run left). Health is how sbx kube ps shows a
// sandbox without it.
//
// MakeObjects and AgentPod only build objects (tested without a cluster);
// Cluster makes them on one.
package kube
