package main

import (
	"strings"
	"testing"
)

// TestNoKubernetesClientset: sbx links no client-go clientset
// (k8s.io/client-go/kubernetes, its typed clients and its scheme of every
// API group), whose initialisation every sbx process would run at its
// start, whatever the command (docs/performance.md). sandbox/kube speaks
// to the API server through a client of the API groups it uses
// (kube.Client); what needs the clientset (informers with their leader
// election) belongs in a program of its own.
func TestNoKubernetesClientset(t *testing.T) {
	for _, goos := range layeringGOOS {
		out := goCmd(t, []string{"GOOS=" + goos}, "list", "-deps", "-f", "{{.ImportPath}}{{range .Imports}} {{.}}{{end}}", "./cmd/sbx")
		imports := map[string][]string{}
		var deps []string
		for line := range strings.Lines(out) {
			fields := strings.Fields(line)
			if len(fields) > 0 {
				deps = append(deps, fields[0])
				imports[fields[0]] = fields[1:]
			}
		}
		for _, dep := range deps {
			if dep == "k8s.io/client-go/kubernetes" || strings.HasPrefix(dep, "k8s.io/client-go/kubernetes/") {
				t.Errorf("on %s sbx links %s, by the imports %s", goos, dep, strings.Join(importChain(imports, modulePath+"/cmd/sbx", dep), " -> "))
			}
		}
	}
}
