package sandbox

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/moby/moby/api/types/mount"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// TestDockerConfig checks what the Docker runtime asks of Docker against
// docs/network.md: no capability beyond BaseCapabilities and CapAdd (none
// for a user that is not root), never CAP_NET_ADMIN or CAP_NET_RAW,
// no-new-privileges, Docker's default seccomp profile (nothing turns it
// off), a read-only root, no network but the pause container's (whose
// own is "none"), and ContainerSpec's limits, masks, mounts and init.
func TestDockerConfig(t *testing.T) {
	cs := testContainerSpec()
	cs.Image = "example.test/x:1"
	cs.Masked = []string{"/etc/shadow"}
	cs.Init = "/usr/bin/tini-static"
	cs.Mounts = []specs.Mount{{Destination: "/data", Source: "/srv/data", Type: "bind", Options: []string{"rbind", "ro"}}}
	secure := func(t *testing.T, opts []string) {
		t.Helper()
		if !slices.Contains(opts, "no-new-privileges") {
			t.Errorf("security options %v lack no-new-privileges", opts)
		}
		for _, o := range opts {
			if strings.Contains(o, "unconfined") || strings.HasPrefix(o, "seccomp") || strings.HasPrefix(o, "label") {
				t.Errorf("security option %q weakens the default profiles", o)
			}
		}
	}
	for _, tc := range []struct {
		name    string
		user    dockerUser
		capAdd  []string
		wantCap []string
		wantErr error
	}{
		{"nobody", dockerUser{UID: NobodyID, GID: NobodyID}, nil, nil, nil},
		{"root", dockerUser{}, nil, BaseCapabilities, nil},
		{"root with CAP_CHOWN", dockerUser{}, []string{"CAP_CHOWN"}, append(slices.Clone(BaseCapabilities), "CAP_CHOWN"), nil},
		{"nobody with CAP_CHOWN", dockerUser{UID: NobodyID, GID: NobodyID}, []string{"CAP_CHOWN"}, nil, ErrDockerCapAdd},
		{"root with CAP_NET_ADMIN", dockerUser{}, []string{"CAP_NET_ADMIN"}, nil, errors.New("only those")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cs := cs
			cs.CapAdd = tc.capAdd
			cfg, hc, err := dockerCommandConfig(cs, "pauseid", tc.user, false)
			if tc.wantErr != nil {
				if err == nil || !errors.Is(err, tc.wantErr) && !strings.Contains(err.Error(), tc.wantErr.Error()) {
					t.Fatalf("error %v, want %v", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(hc.CapDrop, []string{"ALL"}) || !slices.Equal(hc.CapAdd, tc.wantCap) {
				t.Errorf("CapDrop %v, CapAdd %v; want ALL and %v", hc.CapDrop, hc.CapAdd, tc.wantCap)
			}
			for _, c := range hc.CapAdd {
				if c == "CAP_NET_ADMIN" || c == "CAP_NET_RAW" {
					t.Errorf("CapAdd holds %s", c)
				}
			}
			secure(t, hc.SecurityOpt)
			if hc.Privileged || !hc.ReadonlyRootfs || hc.NetworkMode != "container:pauseid" || len(hc.PortBindings) > 0 || hc.PidMode != "" || hc.IpcMode != "" || hc.UsernsMode != "" {
				t.Errorf("host config %+v: want unprivileged, a read-only root, the pause container's network and nothing of the host's", hc)
			}
			if want := strconvU(tc.user.UID) + ":" + strconvU(tc.user.GID); cfg.User != want {
				t.Errorf("user %q, want %q", cfg.User, want)
			}
			if want := append([]string{InitPath, "-g", "--"}, cs.Args...); !slices.Equal(cfg.Entrypoint, want) || len(cfg.Cmd) != 0 {
				t.Errorf("entrypoint %q, cmd %q; want %q and none of the image's", cfg.Entrypoint, cfg.Cmd, want)
			}
			if cfg.Hostname != "" || cfg.Labels[DockerLabelSandbox] != cs.ID || cfg.Labels[DockerLabelRole] != DockerRoleCommand {
				t.Errorf("hostname %q, labels %v", cfg.Hostname, cfg.Labels)
			}
			if r := hc.Resources; r.Memory != 2<<30 || r.CPUQuota != 150_000 || r.CPUPeriod != 100_000 || r.PidsLimit == nil || *r.PidsLimit != DefaultPidsLimit {
				t.Errorf("resources %+v do not carry the limits", r)
			}
			if !slices.Contains(hc.MaskedPaths, "/etc/shadow") || !slices.Contains(hc.MaskedPaths, "/proc/kcore") || !slices.Contains(hc.ReadonlyPaths, "/proc/sys") {
				t.Errorf("masked %v, read-only %v: want /etc/shadow besides Docker's defaults", hc.MaskedPaths, hc.ReadonlyPaths)
			}
			if len(hc.Mounts) != 2 || hc.Mounts[0].Target != InitPath || !hc.Mounts[0].ReadOnly ||
				hc.Mounts[1].Target != "/data" || !hc.Mounts[1].ReadOnly || !hc.Mounts[1].BindOptions.NonRecursive {
				t.Errorf("mounts %+v: want tini read-only at %s, and /data read-only without what is mounted below it", hc.Mounts, InitPath)
			}
		})
	}

	// A daemon that makes read-only binds read-only all the way down
	// shows what is below them.
	_, hc, err := dockerCommandConfig(cs, "pauseid", dockerUser{UID: NobodyID, GID: NobodyID}, true)
	if err != nil {
		t.Fatal(err)
	}
	if bo := hc.Mounts[1].BindOptions; bo.NonRecursive || !bo.ReadOnlyForceRecursive {
		t.Errorf("bind options %+v, want read-only recursively", bo)
	}

	cfg, phc := dockerPauseConfig(cs, "/usr/bin/busybox")
	if !cfg.NetworkDisabled || phc.NetworkMode != "none" || !slices.Equal(phc.CapDrop, []string{"ALL"}) || len(phc.CapAdd) > 0 || phc.Privileged || !phc.ReadonlyRootfs {
		t.Errorf("pause host config %+v: want network none, no capability, unprivileged, a read-only root", phc)
	}
	secure(t, phc.SecurityOpt)
	if cfg.User != "65534:65534" || cfg.Entrypoint[0] != DockerPausePath || !strings.HasPrefix(DockerPausePath, "/dev/") || cfg.Hostname != "sbx-"+cs.ID {
		t.Errorf("pause config %+v: want nobody running busybox from /dev, hostname sbx-%s", cfg, cs.ID)
	}
	if m := phc.Mounts; len(m) != 1 || m[0].Source != "/usr/bin/busybox" || m[0].Target != DockerPausePath || !m[0].ReadOnly || m[0].Type != mount.TypeBind {
		t.Errorf("pause mounts %+v", m)
	}
}

// TestDockerImageUser: an image's user is resolved in its own passwd and
// group files, kept when it is not root, and never with group 0.
func TestDockerImageUser(t *testing.T) {
	passwd := []byte("root:x:0:0:root:/root:/bin/sh\napp:x:1001:0::/home/app:/bin/sh\nweb:x:33:33::/var/www:/bin/sh\n# comment\n")
	group := []byte("root:x:0:app\nwww-data:x:33:\nextra:x:2000:app,web\n")
	fallback := dockerUser{UID: NobodyID, GID: NobodyID}
	for _, tc := range []struct {
		spec string
		want dockerUser
		err  string
	}{
		{"", fallback, ""},
		{"root", fallback, ""},
		{"0", fallback, ""},
		{"0:0", fallback, ""},
		{"app", dockerUser{UID: 1001, GID: NobodyID, Groups: []uint32{2000}}, ""},
		{"1001", dockerUser{UID: 1001, GID: NobodyID, Groups: []uint32{2000}}, ""},
		{"web", dockerUser{UID: 33, GID: 33, Groups: []uint32{2000}}, ""},
		{"web:extra", dockerUser{UID: 33, GID: 2000}, ""},
		{"app:0", dockerUser{UID: 1001, GID: NobodyID}, ""},
		{"4242", dockerUser{UID: 4242, GID: NobodyID}, ""},
		{"4242:4243", dockerUser{UID: 4242, GID: 4243}, ""},
		{"ghost", dockerUser{}, "not in its /etc/passwd"},
		{"app:ghosts", dockerUser{}, "not in its /etc/group"},
	} {
		got, err := imageUser(tc.spec, passwd, group, fallback)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%q: error %v, want %q", tc.spec, err, tc.err)
			}
			continue
		}
		if err != nil || got.UID != tc.want.UID || got.GID != tc.want.GID || !slices.Equal(got.Groups, tc.want.Groups) {
			t.Errorf("%q: %+v, %v; want %+v", tc.spec, got, err, tc.want)
		}
	}
}
