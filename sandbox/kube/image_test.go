package kube

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"debug/elf"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/big"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// testStaticELF writes a minimal static x86-64 Linux executable (it calls
// exit(0)): one PT_LOAD segment, no loader, no dynamic section.
func testStaticELF(t *testing.T, dir string) string {
	t.Helper()
	code := []byte{0xbf, 0, 0, 0, 0, 0xb8, 60, 0, 0, 0, 0x0f, 0x05} // mov edi,0; mov eax,60; syscall
	const base, hdrs = 0x400000, 64 + 56
	size := uint64(hdrs + len(code))
	var b bytes.Buffer
	h := elf.Header64{Type: uint16(elf.ET_EXEC), Machine: uint16(elf.EM_X86_64), Version: uint32(elf.EV_CURRENT),
		Entry: base + hdrs, Phoff: 64, Ehsize: 64, Phentsize: 56, Phnum: 1, Shentsize: 64}
	copy(h.Ident[:], elf.ELFMAG)
	h.Ident[elf.EI_CLASS], h.Ident[elf.EI_DATA], h.Ident[elf.EI_VERSION] = byte(elf.ELFCLASS64), byte(elf.ELFDATA2LSB), byte(elf.EV_CURRENT)
	binary.Write(&b, binary.LittleEndian, h)
	binary.Write(&b, binary.LittleEndian, elf.Prog64{Type: uint32(elf.PT_LOAD), Flags: uint32(elf.PF_R | elf.PF_X),
		Vaddr: base, Paddr: base, Filesz: size, Memsz: size, Align: 0x1000})
	b.Write(code)
	path := filepath.Join(dir, "sbx")
	if err := os.WriteFile(path, b.Bytes(), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

// testCACerts writes a bundle of one self-signed CA certificate.
func testCACerts(t *testing.T, dir string) string {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "kubeimage test CA"},
		NotBefore: time.Now(), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "ca-certificates.crt")
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// testArchive is what a docker save archive holds, read back.
type testArchive struct {
	manifest []struct {
		Config   string
		RepoTags []string
		Layers   []string
	}
	config struct {
		Architecture string `json:"architecture"`
		OS           string `json:"os"`
		Config       struct {
			Entrypoint []string `json:"Entrypoint"`
			Cmd        []string `json:"Cmd"`
			User       string   `json:"User"`
		} `json:"config"`
		RootFS struct {
			DiffIDs []string `json:"diff_ids"`
		} `json:"rootfs"`
	}
	layerDiffID string            // sha256 of the uncompressed layer
	entries     []string          // "name mode time uid:gid" of the layer's entries, in order
	contents    map[string][]byte // the layer's regular files
}

// readTestArchive reads a docker save archive of one image of one layer.
func readTestArchive(t *testing.T, data []byte) testArchive {
	t.Helper()
	files := map[string][]byte{}
	tr := tar.NewReader(bytes.NewReader(data))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("reading the archive: %v", err)
		}
		if files[h.Name], err = io.ReadAll(tr); err != nil {
			t.Fatal(err)
		}
	}
	var a testArchive
	if err := json.Unmarshal(files["manifest.json"], &a.manifest); err != nil {
		t.Fatalf("manifest.json: %v", err)
	}
	if len(a.manifest) != 1 || len(a.manifest[0].Layers) != 1 {
		t.Fatalf("manifest.json: got %+v, want one image of one layer", a.manifest)
	}
	if err := json.Unmarshal(files[a.manifest[0].Config], &a.config); err != nil {
		t.Fatalf("the config %s: %v", a.manifest[0].Config, err)
	}
	layer := files[a.manifest[0].Layers[0]]
	if layer == nil {
		t.Fatalf("the archive has no %s", a.manifest[0].Layers[0])
	}
	zr, err := gzip.NewReader(bytes.NewReader(layer))
	if err != nil {
		t.Fatalf("the layer: %v", err)
	}
	raw, err := io.ReadAll(zr)
	if err != nil {
		t.Fatalf("the layer: %v", err)
	}
	sum := sha256.Sum256(raw)
	a.layerDiffID = "sha256:" + hex.EncodeToString(sum[:])
	a.contents = map[string][]byte{}
	lr := tar.NewReader(bytes.NewReader(raw))
	for {
		h, err := lr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("reading the layer: %v", err)
		}
		a.entries = append(a.entries, fmt.Sprintf("%s %v %s %d:%d", h.Name, h.FileInfo().Mode(), h.ModTime.UTC().Format(time.RFC3339), h.Uid, h.Gid))
		if h.Typeflag == tar.TypeReg {
			a.contents[h.Name], _ = io.ReadAll(lr)
		}
	}
	return a
}

// TestWriteImage: the archive is docker save's format with one image
// named by the tag: its config names linux/amd64 (from the ELF), the
// entrypoint /sbx, a non-root user, and the layer's diff ID; the layer
// holds exactly /tmp, /sbx and the CA bundle, with the host files'
// contents, and no shell. The same inputs make the same bytes.
func TestWriteImage(t *testing.T) {
	dir := t.TempDir()
	exe, ca := testStaticELF(t, dir), testCACerts(t, dir)
	if runtime.GOOS == "linux" && runtime.GOARCH == "amd64" {
		// The test's executable is a real one.
		if err := exec.Command(exe).Run(); err != nil {
			t.Fatalf("running the test's static executable: %v", err)
		}
	}
	var buf bytes.Buffer
	if err := WriteImage(&buf, ImageOptions{Ref: "localhost/sbx:test", Exe: exe, CACerts: ca}); err != nil {
		t.Fatalf("WriteImage: %v", err)
	}
	a := readTestArchive(t, buf.Bytes())
	if got, want := a.manifest[0].RepoTags, []string{"localhost/sbx:test"}; !cmp.Equal(got, want) {
		t.Errorf("RepoTags: got %q, want %q", got, want)
	}
	c := a.config
	if c.OS != "linux" || c.Architecture != "amd64" {
		t.Errorf("platform: got %s/%s, want linux/amd64", c.OS, c.Architecture)
	}
	if got, want := c.Config.Entrypoint, []string{"/sbx"}; !cmp.Equal(got, want) || c.Config.Cmd != nil {
		t.Errorf("entrypoint and cmd: got %q %q, want %q and none", got, c.Config.Cmd, want)
	}
	if c.Config.User != "65532:65532" {
		t.Errorf("user: got %q, want 65532:65532", c.Config.User)
	}
	if got, want := c.RootFS.DiffIDs, []string{a.layerDiffID}; !cmp.Equal(got, want) {
		t.Errorf("diff_ids: got %q, want the layer's %q", got, want)
	}
	const owner = " 1970-01-01T00:00:00Z 0:0"
	wantEntries := []string{
		"tmp/ dtrwxrwxrwx" + owner,
		"sbx -rwxr-xr-x" + owner,
		"etc/ drwxr-xr-x" + owner,
		"etc/ssl/ drwxr-xr-x" + owner,
		"etc/ssl/certs/ drwxr-xr-x" + owner,
		"etc/ssl/certs/ca-certificates.crt -rw-r--r--" + owner,
	}
	if diff := cmp.Diff(wantEntries, a.entries); diff != "" {
		t.Errorf("the layer's entries (-want +got):\n%s", diff)
	}
	for path, host := range map[string]string{"sbx": exe, "etc/ssl/certs/ca-certificates.crt": ca} {
		want, err := os.ReadFile(host)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(a.contents[path], want) {
			t.Errorf("%s in the layer: got %d bytes, want %s's %d", path, len(a.contents[path]), host, len(want))
		}
	}

	var again bytes.Buffer
	if err := WriteImage(&again, ImageOptions{Ref: "localhost/sbx:test", Exe: exe, CACerts: ca}); err != nil {
		t.Fatalf("WriteImage again: %v", err)
	}
	if !bytes.Equal(buf.Bytes(), again.Bytes()) {
		t.Errorf("WriteImage twice with the same inputs: got different archives, want the same bytes")
	}
}

// TestWriteImageRefusals: what cannot make a working image is refused
// before anything is written, with the error callers can test for.
func TestWriteImageRefusals(t *testing.T) {
	dir := t.TempDir()
	exe, ca := testStaticELF(t, dir), testCACerts(t, dir)
	script := filepath.Join(dir, "script")
	noPEM := filepath.Join(dir, "empty.crt")
	for _, f := range []struct{ path, data string }{{script, "#!/bin/sh\necho hi\n"}, {noPEM, "not a certificate\n"}} {
		if err := os.WriteFile(f.path, []byte(f.data), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	dynamic := "/bin/ls"
	if _, err := os.Stat(dynamic); err != nil {
		t.Fatalf("this test needs a dynamically linked executable at %s: %v", dynamic, err)
	}
	for _, tc := range []struct {
		name         string
		o            ImageOptions
		wantIs       error  // nil: any error
		wantContains string // in the message
	}{
		{"dynamic", ImageOptions{Ref: "sbx:1", Exe: dynamic, CACerts: ca}, ErrImageNotStatic, "CGO_ENABLED=0"},
		{"not ELF", ImageOptions{Ref: "sbx:1", Exe: script, CACerts: ca}, ErrImageNotLinux, "CGO_ENABLED=0"},
		{"no executable", ImageOptions{Ref: "sbx:1", Exe: filepath.Join(dir, "none"), CACerts: ca}, fs.ErrNotExist, "none"},
		{"no CA bundle", ImageOptions{Ref: "sbx:1", Exe: exe, CACerts: filepath.Join(dir, "none.crt")}, fs.ErrNotExist, "none.crt"},
		{"CA bundle without certificates", ImageOptions{Ref: "sbx:1", Exe: exe, CACerts: noPEM}, nil, "holds no PEM certificate"},
		{"CA bundle a directory", ImageOptions{Ref: "sbx:1", Exe: exe, CACerts: dir}, nil, "not a regular file"},
		{"no ref", ImageOptions{Exe: exe, CACerts: ca}, nil, "give a name with a tag"},
		{"digest ref", ImageOptions{Ref: "sbx@sha256:" + strings.Repeat("a", 64), Exe: exe, CACerts: ca}, nil, "give a name with a tag"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			err := WriteImage(&buf, tc.o)
			if err == nil {
				t.Fatalf("WriteImage: got no error, want one")
			}
			if tc.wantIs != nil && !errors.Is(err, tc.wantIs) {
				t.Errorf("WriteImage: got %v, want errors.Is %v", err, tc.wantIs)
			}
			if !strings.Contains(err.Error(), tc.wantContains) {
				t.Errorf("WriteImage: got %q, want it to say %q", err, tc.wantContains)
			}
			if buf.Len() != 0 {
				t.Errorf("WriteImage wrote %d bytes, want none", buf.Len())
			}
		})
	}
}

// TestWriteImageNoHostCACerts: with no bundle named and none of the
// host's usual ones there, WriteImage says which it looked for.
func TestWriteImageNoHostCACerts(t *testing.T) {
	dir := t.TempDir()
	missing := []string{filepath.Join(dir, "a.crt"), filepath.Join(dir, "b.pem")}
	saved := imageCACertsCandidates
	imageCACertsCandidates = missing
	t.Cleanup(func() { imageCACertsCandidates = saved })
	var buf bytes.Buffer
	err := WriteImage(&buf, ImageOptions{Ref: "sbx:1", Exe: testStaticELF(t, dir)})
	if !errors.Is(err, ErrImageNoCACerts) || !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("WriteImage: got %v, want ErrImageNoCACerts and fs.ErrNotExist", err)
	}
	for _, want := range append(missing, "ca-certificates") {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("WriteImage: got %q, want it to name %s", err, want)
		}
	}

	imageCACertsCandidates = append(missing, testCACerts(t, dir))
	if err := WriteImage(&buf, ImageOptions{Ref: "sbx:1", Exe: testStaticELF(t, dir)}); err != nil {
		t.Fatalf("WriteImage with the third candidate there: %v", err)
	}
}

// TestWriteImageFile: the archive replaces the file whole, mode 0644,
// leaving no temporary file; a failure leaves the old file as it was.
func TestWriteImageFile(t *testing.T) {
	dir := t.TempDir()
	bin := t.TempDir()
	exe, ca := testStaticELF(t, bin), testCACerts(t, bin)
	out := filepath.Join(dir, "sbx.tar")
	if err := os.WriteFile(out, []byte("old"), 0o600); err != nil {
		t.Fatal(err)
	}
	listDir := func() []string {
		entries, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		return names
	}

	if err := WriteImageFile(out, ImageOptions{Ref: "sbx:1", Exe: "/bin/ls", CACerts: ca}); !errors.Is(err, ErrImageNotStatic) {
		t.Fatalf("WriteImageFile with a dynamic executable: got %v, want ErrImageNotStatic", err)
	}
	if data, _ := os.ReadFile(out); string(data) != "old" {
		t.Errorf("after a failed WriteImageFile: got %q in the file, want the old %q", data, "old")
	}
	if got := listDir(); !cmp.Equal(got, []string{"sbx.tar"}) {
		t.Errorf("after a failed WriteImageFile: got files %q, want only sbx.tar", got)
	}

	if err := WriteImageFile(out, ImageOptions{Ref: "sbx:1", Exe: exe, CACerts: ca}); err != nil {
		t.Fatalf("WriteImageFile: %v", err)
	}
	st, err := os.Stat(out)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o644 {
		t.Errorf("mode: got %v, want 0644", st.Mode().Perm())
	}
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if a := readTestArchive(t, data); !cmp.Equal(a.manifest[0].RepoTags, []string{"sbx:1"}) {
		t.Errorf("RepoTags: got %q, want [sbx:1]", a.manifest[0].RepoTags)
	}
	if got := listDir(); !cmp.Equal(got, []string{"sbx.tar"}) {
		t.Errorf("after WriteImageFile: got files %q, want only sbx.tar", got)
	}
}

func TestImageDefaultRef(t *testing.T) {
	for _, tc := range []struct{ version, want string }{
		{"v1.2.3", "sbx:v1.2.3"},
		{"dev", "sbx:dev"},
		{"dev-0123456789ab-dirty", "sbx:dev-0123456789ab-dirty"},
		{"v0.0.0-20261126133200-0123456789ab+dirty", "sbx:v0.0.0-20261126133200-0123456789ab-dirty"},
		{"", "sbx:dev"},
		{"-x", "sbx:v-x"},
		{strings.Repeat("a", 200), "sbx:" + strings.Repeat("a", 128)},
	} {
		if got := ImageDefaultRef(tc.version); got != tc.want {
			t.Errorf("ImageDefaultRef(%q): got %q, want %q", tc.version, got, tc.want)
		}
	}
}
