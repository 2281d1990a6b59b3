package kube

import "testing"

func TestHealth(t *testing.T) {
	running := Sandbox{ID: "1a2b3c4d", Agent: "Running", Gateway: "Running", GatewayReady: true, ExitCode: -1}
	for _, tc := range []struct {
		name string
		edit func(*Sandbox)
		want string
	}{
		{"both running", func(*Sandbox) {}, "ok"},
		{"gateway pod gone", func(s *Sandbox) { s.Gateway, s.GatewayReady = "", false }, "gateway gone: sbx kube stop 1a2b3c4d"},
		{"gateway pod being deleted", func(s *Sandbox) { s.GatewayDeleting = true }, "gateway gone: sbx kube stop 1a2b3c4d"},
		{"gateway failed", func(s *Sandbox) { s.Gateway, s.GatewayReady = "Failed", false }, "gateway ended: sbx kube stop 1a2b3c4d"},
		{"gateway starting", func(s *Sandbox) { s.Gateway, s.GatewayReady, s.Agent = "Pending", false, "" }, "starting"},
		{"gateway not ready", func(s *Sandbox) { s.GatewayReady = false }, "gateway not ready"},
		{"agent gone", func(s *Sandbox) { s.Agent = "" }, "agent gone: sbx kube stop 1a2b3c4d"},
		{"agent exited", func(s *Sandbox) { s.Agent, s.ExitCode = "Succeeded", 3 }, "ended (exit 3): sbx kube stop 1a2b3c4d"},
		{"agent ended without a status", func(s *Sandbox) { s.Agent = "Failed" }, "agent ended: sbx kube stop 1a2b3c4d"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sb := running
			tc.edit(&sb)
			if got := Health(sb); got != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}
