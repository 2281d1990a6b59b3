package selftest

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"

	"github.com/moby/moby/client"
)

// The docker runtime runs images only (it cannot bind the host's
// directories read-only all the way down), so with it selftest's probe
// runs from a throwaway image holding sbx and what it links.

// probeImageLibDir is where the probe image keeps the libraries sbx links,
// named by LD_LIBRARY_PATH; the dynamic loader stays at its own path.
const probeImageLibDir = "/sbx-selftest/lib"

// probeImageExe is sbx in the probe image.
const probeImageExe = "/sbx-selftest/sbx"

// loadProbeImage loads into Docker (at dockerHost, "" for its default) an
// image that holds exe and, when it is linked dynamically, its loader and
// libraries, and returns the image's name and what removes it.
func loadProbeImage(ctx context.Context, dockerHost, exe string) (ref string, remove func() error, retErr error) {
	files, err := probeImageFiles(exe)
	if err != nil {
		return "", nil, err
	}
	ref = "sbx-selftest/probe:" + randomHex(6)
	archive, err := dockerArchive(ref, files)
	if err != nil {
		return "", nil, err
	}
	opts := []client.Opt{client.FromEnv}
	if dockerHost != "" {
		opts = append(opts, client.WithHost(dockerHost))
	}
	c, err := client.New(opts...)
	if err != nil {
		return "", nil, fmt.Errorf("connecting to Docker: %w", err)
	}
	remove = func() error {
		defer c.Close()
		_, err := c.ImageRemove(context.WithoutCancel(ctx), ref, client.ImageRemoveOptions{Force: true, PruneChildren: true})
		if err != nil {
			return fmt.Errorf("removing the probe image %s: %w", ref, err)
		}
		return nil
	}
	res, err := c.ImageLoad(ctx, bytes.NewReader(archive), client.ImageLoadWithQuiet(true))
	if err != nil {
		c.Close()
		return "", nil, fmt.Errorf("loading the probe image into Docker: %w", err)
	}
	msg, _ := io.ReadAll(res)
	res.Close()
	if !bytes.Contains(msg, []byte("Loaded image")) {
		remove()
		return "", nil, fmt.Errorf("loading the probe image into Docker: %s", bytes.TrimSpace(msg))
	}
	return ref, remove, nil
}

// probeImageFiles maps the probe image's paths to the host files to put
// there: exe, and its dynamic loader and libraries (found as the loader
// would, without its cache, in the usual directories) when it has them.
func probeImageFiles(exe string) (map[string]string, error) {
	files := map[string]string{probeImageExe: exe}
	f, err := elf.Open(exe)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", exe, err)
	}
	defer f.Close()
	var interp string
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			data, err := io.ReadAll(p.Open())
			if err != nil {
				return nil, fmt.Errorf("reading %s's loader: %w", exe, err)
			}
			interp = strings.TrimRight(string(data), "\x00")
		}
	}
	if interp == "" {
		return files, nil // static
	}
	files[interp] = interp
	triplet := map[string]string{"amd64": "x86_64-linux-gnu", "arm64": "aarch64-linux-gnu", "386": "i386-linux-gnu",
		"arm": "arm-linux-gnueabihf", "riscv64": "riscv64-linux-gnu", "ppc64le": "powerpc64le-linux-gnu", "s390x": "s390x-linux-gnu"}[runtime.GOARCH]
	dirs := []string{filepath.Dir(interp), "/lib/" + triplet, "/usr/lib/" + triplet, "/lib64", "/usr/lib64", "/lib", "/usr/lib"}
	queue := []*elf.File{f}
	for len(queue) > 0 {
		libs, err := queue[0].ImportedLibraries()
		queue = queue[1:]
		if err != nil {
			return nil, err
		}
		for _, lib := range libs {
			dst := filepath.Join(probeImageLibDir, lib)
			if _, ok := files[dst]; ok {
				continue
			}
			var found string
			for _, d := range dirs {
				if _, err := os.Stat(filepath.Join(d, lib)); err == nil {
					found = filepath.Join(d, lib)
					break
				}
			}
			if found == "" {
				return nil, fmt.Errorf("%s needs %s, which is in none of %s", exe, lib, strings.Join(dirs, ", "))
			}
			files[dst] = found
			lf, err := elf.Open(found)
			if err != nil {
				return nil, err
			}
			defer lf.Close()
			queue = append(queue, lf)
		}
	}
	return files, nil
}

// dockerArchive is a docker save archive (which every Docker loads) of
// one image, ref, of one layer holding files (image path to host path)
// and the directories a container needs.
func dockerArchive(ref string, files map[string]string) ([]byte, error) {
	var layer bytes.Buffer
	tw := tar.NewWriter(&layer)
	dirs := map[string]bool{}
	addDir := func(d string) error {
		if dirs[d] {
			return nil
		}
		dirs[d] = true
		return tw.WriteHeader(&tar.Header{Name: d + "/", Typeflag: tar.TypeDir, Mode: 0o755})
	}
	for _, d := range []string{"proc", "dev", "sys", "tmp", "etc", "run"} {
		if err := addDir(d); err != nil {
			return nil, err
		}
	}
	for _, dst := range slices.Sorted(maps.Keys(files)) {
		data, err := os.ReadFile(files[dst])
		if err != nil {
			return nil, err
		}
		name := strings.TrimPrefix(dst, "/")
		parts := strings.Split(name, "/")
		for i := 1; i < len(parts); i++ {
			if err := addDir(strings.Join(parts[:i], "/")); err != nil {
				return nil, err
			}
		}
		if err := tw.WriteHeader(&tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o755, Size: int64(len(data))}); err != nil {
			return nil, err
		}
		if _, err := tw.Write(data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	sum := sha256.Sum256(layer.Bytes())
	layerHex := hex.EncodeToString(sum[:])
	config, err := json.Marshal(map[string]any{"architecture": runtime.GOARCH, "os": "linux",
		"config": map[string]any{"Env": []string{"PATH=/sbx-selftest", "LD_LIBRARY_PATH=" + probeImageLibDir}},
		"rootfs": map[string]any{"type": "layers", "diff_ids": []string{"sha256:" + layerHex}}})
	if err != nil {
		return nil, err
	}
	manifest, err := json.Marshal([]map[string]any{{"Config": "config.json", "RepoTags": []string{ref}, "Layers": []string{layerHex + "/layer.tar"}}})
	if err != nil {
		return nil, err
	}
	var archive bytes.Buffer
	aw := tar.NewWriter(&archive)
	for _, f := range []struct {
		name string
		data []byte
	}{{layerHex + "/layer.tar", layer.Bytes()}, {"config.json", config}, {"manifest.json", manifest}} {
		if err := aw.WriteHeader(&tar.Header{Name: f.name, Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(f.data))}); err != nil {
			return nil, err
		}
		if _, err := aw.Write(f.data); err != nil {
			return nil, err
		}
	}
	if err := aw.Close(); err != nil {
		return nil, err
	}
	return archive.Bytes(), nil
}
