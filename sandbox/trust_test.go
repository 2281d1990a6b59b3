package sandbox

import (
	"slices"
	"strings"
	"testing"
)

// TestTrustEnv: the trust's variables come first, so the command's own
// win, and the command's JAVA_TOOL_OPTIONS is kept after the truststore's.
func TestTrustEnv(t *testing.T) {
	tr := &Trust{CertPEM: []byte("ca"), TrustStore: []byte("ts")}
	env := tr.withEnv([]string{"A=1", "JAVA_TOOL_OPTIONS=-Xmx1g", "SSL_CERT_FILE=/mine.pem"})
	var java []string
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "JAVA_TOOL_OPTIONS="); ok {
			java = append(java, v)
		}
	}
	if len(java) != 1 || !strings.HasPrefix(java[0], "-Djavax.net.ssl.trustStore="+TrustDir) || !strings.HasSuffix(java[0], " -Xmx1g") {
		t.Errorf("JAVA_TOOL_OPTIONS: got %q, want one value, the truststore's options then -Xmx1g", java)
	}
	mine := slices.Index(env, "SSL_CERT_FILE=/mine.pem")
	ours := slices.Index(env, "SSL_CERT_FILE="+TrustDir+"/bundle.pem")
	if mine < 0 || ours < 0 || ours > mine || !slices.Contains(env, "A=1") {
		t.Errorf("got %q, want ours first and the command's own after (the last one wins)", env)
	}
	// Without a truststore the command's JAVA_TOOL_OPTIONS stays as it is.
	if env := (&Trust{CertPEM: []byte("ca")}).withEnv([]string{"JAVA_TOOL_OPTIONS=-Xmx1g"}); !slices.Contains(env, "JAVA_TOOL_OPTIONS=-Xmx1g") {
		t.Errorf("without a truststore: got %q", env)
	}
}
