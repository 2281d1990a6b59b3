//go:build linux

package audit

import (
	"bufio"
	"bytes"
	"context"
	"image"
	"image/png"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// chromiumPath is where Debian's chromium package puts the browser.
const chromiumPath = "/usr/bin/chromium"

// TestHTMLReportInChromium opens a report in a real headless Chromium
// whose only way out is a proxy on loopback that the test runs, and checks
// that the page renders, sends no request, and shows the report's numbers.
// A control page with a remote image, rendered the same way, must reach
// the proxy: otherwise the check that nothing did proves nothing.
func TestHTMLReportInChromium(t *testing.T) {
	bin := chromiumPath
	if _, err := os.Stat(bin); err != nil {
		if os.Getenv("SBX_REQUIRE_PRIVILEGED") == "1" {
			t.Fatalf("chromium is not installed (%v), and SBX_REQUIRE_PRIVILEGED=1: install it with apt-get install -y chromium", err)
		}
		t.Skipf("chromium is not installed (%v): apt-get install -y chromium to run this test", err)
	}

	dir := t.TempDir()
	rep := htmlTestReport()
	page := filepath.Join(dir, "report.html")
	writeFile(t, page, renderHTML(t, rep))
	control := filepath.Join(dir, "control.html")
	writeFile(t, control, []byte(`<!DOCTYPE html><html><head><meta charset="utf-8"><title>control</title></head>`+
		`<body><p>control</p><img src="http://example.invalid/x.png" alt=""></body></html>`))

	// The control: a page that fetches must be seen to fetch.
	out, reqs := runChromium(t, bin, control, "--dump-dom")
	if !strings.Contains(string(out), "control") {
		t.Errorf("control page: the dumped DOM does not have the page:\n%s", out)
	}
	if got := pageRequests(reqs); !slices.ContainsFunc(got, func(l string) bool { return requestTarget(l) == "example.invalid:80" }) {
		t.Fatalf("control page with a remote image: the proxy saw %q of the page's (all: %q), want its request for example.invalid; the no-network check below would prove nothing", got, reqs)
	}

	// The report: rendered, its DOM dumped, nothing fetched.
	out, reqs = runChromium(t, bin, page, "--dump-dom")
	if got := pageRequests(reqs); len(got) > 0 {
		t.Errorf("report page: the proxy saw %q, want no request", got)
	}
	doc := parseHTML(t, out)
	if len(elements(doc, "g", "bucket")) == 0 || len(elements(doc, "g", "target")) == 0 {
		t.Fatalf("the dumped DOM has no chart bars:\n%.2000s", out)
	}
	checkReportDOM(t, doc, rep)
	checkSelfContained(t, out)

	// A screenshot: the page drew, with the bars' colours.
	shot := filepath.Join(t.TempDir(), "shot.png")
	_, reqs = runChromium(t, bin, page, "--screenshot="+shot, "--window-size=1280,2000")
	if got := pageRequests(reqs); len(got) > 0 {
		t.Errorf("report page, screenshot: the proxy saw %q, want no request", got)
	}
	checkScreenshot(t, shot)
}

func writeFile(t *testing.T, name string, b []byte) {
	t.Helper()
	if err := os.WriteFile(name, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// chromiumOwn are the targets of Chromium's own requests that no flag
// turns off (Chromium 156): the Optimization Guide's on-demand check of
// its model manifest component, which --disable-component-update does not
// stop, and the account list of Google sign-in (ListAccounts), which
// neither --allow-browser-signin=false nor signin.allowed=false stops.
// Chromium sends both from the browser process at start, whatever page
// it opens.
var chromiumOwn = []string{"update.googleapis.com:443", "update.googleapis.com:80", "accounts.google.com:443"}

// pageRequests are the requests of reqs (first lines of proxy
// connections) that the page made: all but those to chromiumOwn. A line
// that is not a request counts as the page's. The control and the report
// are filtered alike.
func pageRequests(reqs []string) []string {
	var out []string
	for _, line := range reqs {
		if !slices.Contains(chromiumOwn, requestTarget(line)) {
			out = append(out, line)
		}
	}
	return out
}

// requestTarget is the host:port a proxy request line asks for
// (CONNECT host:port, GET http://host/path), "" when it is none.
func requestTarget(line string) string {
	f := strings.Fields(line)
	if len(f) != 3 || !strings.HasPrefix(f[2], "HTTP/") {
		return ""
	}
	if f[0] == "CONNECT" {
		return f[1]
	}
	u, err := url.Parse(f[1])
	if err != nil || u.Host == "" {
		return ""
	}
	if u.Port() != "" {
		return u.Host
	}
	return net.JoinHostPort(u.Hostname(), map[string]string{"http": "80", "https": "443"}[u.Scheme])
}

// runChromium opens file in headless Chromium with extra flags and returns
// its standard output and the first line of each connection its proxy
// got. Chromium's proxy is a listener on loopback that answers every
// request with 502, so nothing leaves the machine. The run has 60 s.
func runChromium(t *testing.T, bin, file string, extra ...string) ([]byte, []string) {
	t.Helper()
	proxy := newRecordingProxy(t)
	args := []string{
		"--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--no-default-browser-check",
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		// Beyond the usual: no extensions (Debian's wrapper loads those in
		// /usr/share/chromium/extensions) and no query of Google's time
		// server (clients2.google.com), which the flags above leave on.
		"--disable-extensions", "--disable-default-apps", "--disable-features=NetworkTimeServiceQuerying",
		"--user-data-dir=" + t.TempDir(),
		"--proxy-server=http://" + proxy.addr(), "--proxy-bypass-list=<-loopback>",
	}
	args = append(args, extra...)
	args = append(args, "file://"+file)

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	// Chromium starts helper processes: put them in a group of their own
	// and kill the group when the run times out.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err := cmd.Run()
	if err != nil {
		t.Fatalf("chromium %s: %v (after %v)\nstderr:\n%s", strings.Join(extra, " "), err, time.Since(start), lastLines(stderr.String(), 30))
	}
	t.Logf("chromium %s: %v", strings.Join(extra, " "), time.Since(start).Round(time.Millisecond))
	reqs := proxy.stop()
	if own := len(reqs) - len(pageRequests(reqs)); own > 0 {
		t.Logf("chromium %s: %d requests of Chromium's own to %v, not counted", strings.Join(extra, " "), own, chromiumOwn)
	}
	return stdout.Bytes(), reqs
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(len(lines)-n, 0):], "\n")
}

// recordingProxy is a listener on loopback that stands in for a proxy: it
// records the first line of each connection (GET http://host/path
// HTTP/1.1, CONNECT host:443 HTTP/1.1) and answers 502.
type recordingProxy struct {
	ln   net.Listener
	wg   sync.WaitGroup
	mu   sync.Mutex
	reqs []string
}

func newRecordingProxy(t *testing.T) *recordingProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &recordingProxy{ln: ln}
	p.wg.Add(1)
	// The accept loop ends when stop closes the listener; each
	// connection's goroutine when it has answered, or after 5 s.
	go func() {
		defer p.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.wg.Add(1)
			go func() {
				defer p.wg.Done()
				defer c.Close()
				c.SetDeadline(time.Now().Add(5 * time.Second))
				line, _ := bufio.NewReader(c).ReadString('\n')
				line = strings.TrimRight(line, "\r\n")
				if line == "" {
					// Chromium opens connections ahead of need
					// (preconnect) and may close them unused: a
					// connection that asks for nothing fetches nothing.
					return
				}
				p.mu.Lock()
				p.reqs = append(p.reqs, line)
				p.mu.Unlock()
				c.Write([]byte("HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"))
			}()
		}
	}()
	t.Cleanup(func() { p.stop() })
	return p
}

func (p *recordingProxy) addr() string { return p.ln.Addr().String() }

// stop closes the listener, waits for the connections' goroutines and
// returns what was recorded.
func (p *recordingProxy) stop() []string {
	p.ln.Close()
	p.wg.Wait()
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.reqs
}

// barColours are the colours of allowed, blocked and intercepted bars
// (html.go's --a, --b, --i).
var barColours = map[string][3]int{
	"allowed":     {0x2e, 0x7d, 0x32},
	"blocked":     {0xc6, 0x28, 0x28},
	"intercepted": {0x15, 0x65, 0xc0},
}

// checkScreenshot fails t unless the PNG at name decodes and shows a page:
// many colours, with each bar colour covering a fair number of pixels.
func checkScreenshot(t *testing.T, name string) {
	t.Helper()
	f, err := os.Open(name)
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("screenshot: decoding %s: %v", name, err)
	}
	if b := img.Bounds(); b.Dx() != 1280 || b.Dy() != 2000 {
		t.Errorf("screenshot: got %dx%d, want 1280x2000", b.Dx(), b.Dy())
	}
	colours := map[[3]int]int{}
	near := map[string]int{}
	b := img.Bounds()
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			c := rgb(img, x, y)
			colours[c]++
			for name, want := range barColours {
				if closeColour(c, want, 6) {
					near[name]++
				}
			}
		}
	}
	if len(colours) < 16 {
		t.Errorf("screenshot: got %d distinct colours, want at least 16 (a blank page?)", len(colours))
	}
	for name := range barColours {
		// The smallest bars in the sample are several hundred pixels.
		if near[name] < 200 {
			t.Errorf("screenshot: got %d pixels of the %s bars' colour, want at least 200", near[name], name)
		}
	}
	t.Logf("screenshot: %d distinct colours; bar pixels %v", len(colours), near)
}

func rgb(img image.Image, x, y int) [3]int {
	r, g, b, _ := img.At(x, y).RGBA()
	return [3]int{int(r >> 8), int(g >> 8), int(b >> 8)}
}

func closeColour(a, b [3]int, tol int) bool {
	for i := range a {
		if d := a[i] - b[i]; d > tol || d < -tol {
			return false
		}
	}
	return true
}
