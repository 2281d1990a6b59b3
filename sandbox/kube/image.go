package kube

import (
	"archive/tar"
	"bufio"
	"compress/gzip"
	"crypto/x509"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// What sbx's image holds, and who it runs as unless a pod says otherwise.
const (
	// ImageExePath is sbx in the image, and the image's entrypoint.
	ImageExePath = "/sbx"
	// ImageCACertsPath is the bundle of CA certificates the gateway
	// verifies upstreams with: where Go's crypto/x509 looks first on Linux.
	ImageCACertsPath = "/etc/ssl/certs/ca-certificates.crt"
	// ImageUser is the image's default user (uid:gid), not root. The
	// containers that need root (the agent pod's init container) say so in
	// their securityContext.
	ImageUser = "65532:65532"
)

// imageCACertsCandidates are the host's usual bundles of CA certificates,
// in the order Go's crypto/x509 tries them on Linux.
var imageCACertsCandidates = []string{
	"/etc/ssl/certs/ca-certificates.crt",                // Debian, Ubuntu, Gentoo, Arch
	"/etc/pki/tls/certs/ca-bundle.crt",                  // Fedora, RHEL 6
	"/etc/ssl/ca-bundle.pem",                            // OpenSUSE
	"/etc/pki/tls/cacert.pem",                           // OpenELEC
	"/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem", // CentOS, RHEL 7
	"/etc/ssl/cert.pem",                                 // Alpine
}

// ErrImageNotStatic is returned (wrapped) by WriteImage when the
// executable to put in the image needs a dynamic loader or shared
// libraries, which the image does not have.
var ErrImageNotStatic = errors.New("not a static executable")

// ErrImageNotLinux is returned (wrapped) by WriteImage when the executable
// to put in the image is not a Linux ELF executable.
var ErrImageNotLinux = errors.New("not a Linux executable")

// ErrImageNoCACerts is returned (wrapped) by WriteImage when no bundle of
// CA certificates is named and none of the host's usual ones exists. It
// is fs.ErrNotExist too.
var ErrImageNoCACerts error = imageNoCACertsError{}

type imageNoCACertsError struct{}

func (imageNoCACertsError) Error() string        { return "no CA certificates" }
func (imageNoCACertsError) Is(target error) bool { return target == fs.ErrNotExist }

// imageStaticFix is how to get an sbx that WriteImage takes.
const imageStaticFix = "build a static sbx with `CGO_ENABLED=0 GOOS=linux go build -o sbx ./cmd/sbx` and run that one"

// ImageOptions says what WriteImage puts in sbx's image. The zero value of
// each field but Ref has the meaning documented on it.
type ImageOptions struct {
	// Ref names the image, as a tag: "sbx:v1.2.3", "localhost/sbx:test",
	// "registry.example.com/team/sbx:v1". Required.
	Ref string
	// Exe is the sbx executable put at ImageExePath: a static Linux ELF
	// executable. Empty: the running one (os.Executable).
	Exe string
	// CACerts is the bundle of CA certificates (PEM) put at
	// ImageCACertsPath. Empty: the first of the host's usual bundles that
	// exists, looked for where Go's crypto/x509 looks on Linux.
	CACerts string
}

// ImageDefaultRef is the image's name when none is given: "sbx:" and
// version, with what a tag cannot hold (a build's "+dirty", say) made "-".
func ImageDefaultRef(version string) string {
	var b strings.Builder
	for i, r := range version {
		ok := r == '_' || r == '.' || r == '-' || 'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9'
		if i == 0 && (r == '.' || r == '-') {
			b.WriteString("v")
		}
		if !ok {
			r = '-'
		}
		b.WriteRune(r)
	}
	tag := b.String()
	if tag == "" {
		tag = "dev"
	}
	if len(tag) > 128 {
		tag = tag[:128]
	}
	return "sbx:" + tag
}

// imageFile is a file of the image's single layer, open on the host.
type imageFile struct {
	path string // in the image, without the leading "/"
	mode int64
	f    *os.File
	size int64
}

// WriteImage writes to w an image archive of sbx itself, in the format of
// `docker save`, which `docker load` and `ctr images import` both read:
// one layer holding o.Exe at ImageExePath and o.CACerts at
// ImageCACertsPath (and an empty /tmp, mode 1777), the entrypoint
// [ImageExePath], user ImageUser, and no shell. The image is the same
// (the same digests) for the same executable, bundle and Ref.
//
// The executable must be a static Linux ELF executable: one that is not
// Linux's is refused with ErrImageNotLinux, one that needs a dynamic
// loader or libraries with ErrImageNotStatic. A bundle that does not
// exist is an error that wraps fs.ErrNotExist (ErrImageNoCACerts when
// none was named and the host has none). Nothing is written to w before
// these checks pass; w may hold part of the archive when a later write
// fails.
func WriteImage(w io.Writer, o ImageOptions) error {
	tag, err := name.NewTag(o.Ref)
	if err != nil {
		return fmt.Errorf("naming the image %q (give a name with a tag, such as sbx:v1 or registry.example.com/sbx:v1): %w", o.Ref, err)
	}
	exe := o.Exe
	if exe == "" {
		if exe, err = os.Executable(); err != nil {
			return fmt.Errorf("finding the running sbx to put in the image: %w", err)
		}
	}
	arch, err := imageExeArch(exe)
	if err != nil {
		return err
	}
	exeFile, err := openImageFile(exe, strings.TrimPrefix(ImageExePath, "/"), 0o755)
	if err != nil {
		return fmt.Errorf("reading sbx for the image: %w", err)
	}
	defer exeFile.f.Close()
	caFile, err := openImageCACerts(o.CACerts)
	if err != nil {
		return err
	}
	defer caFile.f.Close()

	files := []imageFile{exeFile, caFile}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return imageLayer(files), nil },
		tarball.WithCompressionLevel(gzip.BestSpeed))
	if err != nil {
		return fmt.Errorf("making the image's layer: %w", err)
	}
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		return fmt.Errorf("making the image: %w", err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return fmt.Errorf("making the image's configuration: %w", err)
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", arch
	cf.Created = v1.Time{Time: time.Unix(0, 0).UTC()}
	cf.Config.Entrypoint = []string{ImageExePath}
	cf.Config.Cmd = nil
	cf.Config.User = ImageUser
	cf.Config.WorkingDir = "/"
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		return fmt.Errorf("making the image's configuration: %w", err)
	}
	if err := tarball.Write(tag, img, w); err != nil {
		return fmt.Errorf("writing the image archive: %w", err)
	}
	return nil
}

// WriteImageFile writes WriteImage's archive to the file path, mode 0644,
// whole or not at all: it is written to a temporary file in path's
// directory, then renamed over path.
func WriteImageFile(path string, o ImageOptions) (retErr error) {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("writing the image archive next to %s: %w", path, err)
	}
	defer func() {
		if retErr != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	bw := bufio.NewWriterSize(tmp, 1<<20)
	if err := WriteImage(bw, o); err != nil {
		return err
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("writing the image archive %s: %w", path, err)
	}
	if err := tmp.Chmod(0o644); err != nil {
		return fmt.Errorf("writing the image archive %s: %w", path, err)
	}
	if err := tmp.Sync(); err != nil {
		return fmt.Errorf("writing the image archive %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("writing the image archive %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("writing the image archive %s: %w", path, err)
	}
	return nil
}

// imageELFArch maps an ELF machine to the image's architecture (GOARCH).
var imageELFArch = map[elf.Machine]string{
	elf.EM_X86_64:    "amd64",
	elf.EM_AARCH64:   "arm64",
	elf.EM_386:       "386",
	elf.EM_ARM:       "arm",
	elf.EM_RISCV:     "riscv64",
	elf.EM_PPC64:     "ppc64le",
	elf.EM_S390:      "s390x",
	elf.EM_LOONGARCH: "loong64",
}

// imageExeArch checks that exe is a static Linux ELF executable, and
// returns its architecture as the image names it.
func imageExeArch(exe string) (string, error) {
	f, err := elf.Open(exe)
	if err != nil {
		var fe *elf.FormatError
		if errors.As(err, &fe) {
			return "", fmt.Errorf("%s is not an ELF executable, as sbx's image needs: %s: %w", exe, imageStaticFix, ErrImageNotLinux)
		}
		return "", fmt.Errorf("reading sbx for the image: %w", err)
	}
	defer f.Close()
	arch, ok := imageELFArch[f.Machine]
	if !ok || f.Type != elf.ET_EXEC && f.Type != elf.ET_DYN ||
		f.OSABI != elf.ELFOSABI_NONE && f.OSABI != elf.ELFOSABI_LINUX {
		return "", fmt.Errorf("%s is not a Linux executable, as sbx's image needs (it is an ELF %v %v file for %v): %s: %w", exe, f.Machine, f.Type, f.OSABI, imageStaticFix, ErrImageNotLinux)
	}
	if f.Machine == elf.EM_PPC64 && f.ByteOrder.String() != "LittleEndian" {
		arch = "ppc64"
	}
	// Static means no loader and no dynamic section at all (which a
	// static-pie has too): what Go links with cgo off.
	var interp string
	var dynamic bool
	for _, p := range f.Progs {
		switch p.Type {
		case elf.PT_INTERP:
			data, err := io.ReadAll(p.Open())
			if err != nil {
				return "", fmt.Errorf("reading %s's dynamic loader: %w", exe, err)
			}
			interp = strings.TrimRight(string(data), "\x00")
		case elf.PT_DYNAMIC:
			dynamic = true
		}
	}
	if interp == "" && !dynamic {
		return arch, nil
	}
	needs := "a dynamic section"
	if interp != "" {
		needs = "the dynamic loader " + interp
	}
	if libs, _ := f.ImportedLibraries(); len(libs) > 0 {
		needs += " and the libraries " + strings.Join(libs, ", ")
	}
	return "", fmt.Errorf("%s is linked dynamically (it has %s), and sbx's image has no loader or libraries: %s: %w", exe, needs, imageStaticFix, ErrImageNotStatic)
}

// HostRoots returns the host's bundle of trusted roots (PEM): the first
// of the usual bundles that exists, as the image's are found. An error
// wraps ErrImageNoCACerts when there is none.
func HostRoots() ([]byte, error) {
	for _, c := range imageCACertsCandidates {
		data, err := os.ReadFile(c)
		if err == nil {
			return data, nil
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("reading the host's trusted roots: %w", err)
		}
	}
	return nil, fmt.Errorf("no bundle of trusted roots on this host (looked for %s): %w", strings.Join(imageCACertsCandidates, ", "), ErrImageNoCACerts)
}

// openImageCACerts opens the bundle of CA certificates for the image:
// path, or when it is empty the first of the host's usual bundles. It
// must hold at least one PEM certificate.
func openImageCACerts(path string) (imageFile, error) {
	caPath := strings.TrimPrefix(ImageCACertsPath, "/")
	if path == "" {
		for _, c := range imageCACertsCandidates {
			if _, err := os.Stat(c); err == nil {
				path = c
				break
			}
		}
		if path == "" {
			return imageFile{}, fmt.Errorf("the image needs CA certificates for its gateway to verify upstreams, and none of %s exists; install them (apt-get install ca-certificates, or your system's package) or name a bundle: %w",
				strings.Join(imageCACertsCandidates, ", "), ErrImageNoCACerts)
		}
	}
	f, err := openImageFile(path, caPath, 0o644)
	if err != nil {
		return imageFile{}, fmt.Errorf("reading the CA certificates for the image's gateway to verify upstreams with: %w", err)
	}
	// A bundle is a few hundred kB; one with no certificate would leave the
	// gateway trusting nothing.
	data, err := io.ReadAll(io.NewSectionReader(f.f, 0, f.size))
	if err == nil && !x509.NewCertPool().AppendCertsFromPEM(data) {
		err = fmt.Errorf("%s holds no PEM certificate; name a bundle of CA certificates", path)
	}
	if err != nil {
		f.f.Close()
		return imageFile{}, fmt.Errorf("reading the CA certificates for the image's gateway to verify upstreams with: %w", err)
	}
	return f, nil
}

// openImageFile opens the regular file host for the image's path inPath.
func openImageFile(host, inPath string, mode int64) (imageFile, error) {
	f, err := os.Open(host)
	if err != nil {
		return imageFile{}, err
	}
	st, err := f.Stat()
	if err == nil && !st.Mode().IsRegular() {
		err = fmt.Errorf("%s is not a regular file", host)
	}
	if err != nil {
		f.Close()
		return imageFile{}, err
	}
	return imageFile{path: inPath, mode: mode, f: f, size: st.Size()}, nil
}

// imageLayer returns the image's layer, an uncompressed tar of files and
// the directories above them, and /tmp. Its entries have fixed times and
// owners, so the same files make the same layer. The tar is written by a
// goroutine into a pipe; it returns when the tar is written or the reader
// is closed.
func imageLayer(files []imageFile) io.ReadCloser {
	pr, pw := io.Pipe()
	go func() {
		pw.CloseWithError(writeImageLayer(pw, files))
	}()
	return pr
}

// writeImageLayer writes imageLayer's tar to w.
func writeImageLayer(w io.Writer, files []imageFile) error {
	epoch := time.Unix(0, 0)
	tw := tar.NewWriter(w)
	dirs := map[string]bool{}
	dir := func(name string, mode int64) error {
		if dirs[name] {
			return nil
		}
		dirs[name] = true
		return tw.WriteHeader(&tar.Header{Name: name + "/", Typeflag: tar.TypeDir, Mode: mode, ModTime: epoch})
	}
	if err := dir("tmp", 0o1777); err != nil {
		return err
	}
	for _, f := range files {
		parts := strings.Split(f.path, "/")
		for i := 1; i < len(parts); i++ {
			if err := dir(strings.Join(parts[:i], "/"), 0o755); err != nil {
				return err
			}
		}
		if err := tw.WriteHeader(&tar.Header{Name: f.path, Typeflag: tar.TypeReg, Mode: f.mode, Size: f.size, ModTime: epoch}); err != nil {
			return err
		}
		if _, err := io.Copy(tw, io.NewSectionReader(f.f, 0, f.size)); err != nil {
			return fmt.Errorf("reading %s for the image: %w", f.f.Name(), err)
		}
	}
	return tw.Close()
}
