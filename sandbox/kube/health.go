package kube

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
)

// Health says in a few words whether sb's sandbox is whole: "ok" while
// its gateway serves and its agent runs; otherwise what is wrong, and
// for a sandbox that cannot recover the command that removes it. A
// detached sandbox has no sbx process watching it: this is how
// `sbx kube ps` shows one whose gateway is gone, whose agent is cut off
// from everything and whose rules name an address the cluster may give
// another pod.
func Health(sb Sandbox) string {
	stop := "sbx kube stop " + sb.ID
	switch {
	case sb.ExitCode >= 0:
		return fmt.Sprintf("ended (exit %d): %s", sb.ExitCode, stop)
	case sb.Gateway == "" || sb.GatewayDeleting:
		return "gateway gone: " + stop
	case sb.Gateway == string(corev1.PodFailed) || sb.Gateway == string(corev1.PodSucceeded):
		return "gateway ended: " + stop
	case sb.Gateway == string(corev1.PodPending):
		return "starting"
	case !sb.GatewayReady:
		return "gateway not ready"
	case sb.Agent == "":
		return "agent gone: " + stop
	case sb.Agent == string(corev1.PodPending):
		return "starting"
	case sb.Agent == string(corev1.PodFailed) || sb.Agent == string(corev1.PodSucceeded):
		return "agent ended: " + stop
	}
	return "ok"
}
