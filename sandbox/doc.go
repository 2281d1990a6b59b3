// Package sandbox runs one sandbox's life: its subnet, network namespace,
// veth pair, the iptables rules inside the namespace and on the host, the
// container, teardown, and garbage collection of what a crashed run left
// (docs/network.md).
//
// It takes plain values (the gateway's address and port, a rootfs path) and
// imports no other package of sbx. Most of it is plans rendered as text
// (rule sets for iptables-restore, OCI specs), tested against golden files
// without root; the parts that change the kernel are tested by
// TestPrivileged* tests, which need root.
//
// Start runs a sandbox's whole life from a Spec, and Wait, Stop and Close
// end it; sbx run only maps its flags to a Spec. The container runtime is
// a Runtime (*Containerd or *Docker) and the gateway a StartGateway
// function that the caller provides, so this package imports no gateway.
// A sandbox starts in overlapping steps, two at once: CreateNamespace
// (the empty namespace), SetupNetwork (rules loaded before any link is
// up) and the gateway on one side, and Runtime.Create on the other (the
// container's record, then, once the namespace exists
// (ContainerSpec.WaitNetns), its process, created but not started); the
// command starts only after both. A failed Start undoes what it made, in
// reverse.
//
// With Spec.Capture (docs/capture.md) the namespace's rules also send DNS
// to the gateway's stub and redirect other TCP connections to a listener
// the gateway serves on the namespace's loopback; the packets they still
// refuse are reported through NFLOG (PacketLog), and Owners tells which
// process of the namespace holds a socket (sock_diag and /proc, no eBPF).
// Start opens these and hands them to the gateway in GatewayConfig.Capture.
//
// Docker cannot join a namespace by path, so with *Docker the empty
// namespace is that of a pause container (its network disabled, so that
// runc makes the namespace and Docker's network code nothing in it; its
// process is the host's static busybox sleeping), mounted at the same
// path in CreateNamespace's place; sbx
// fills it as any other, and the command's container shares it
// ("container:" network mode). No network of Docker's reaches the
// command, and the sandbox's rules, links and addresses are sbx's.
//
// The container runs as the ContainerSpec's user (sbx run never picks host
// root unasked), with none of DroppedCapabilities unless CapAdd gives one
// back, no capability at all for a user that is not root, and within
// Limits (DefaultLimits: processes, memory without swap, CPU). Its own
// cgroups are mounted read-only so that the runtimes inside see the limits.
//
// Every kernel object is named after the sandbox id (namespace sbx-<id>,
// veths sbxh<id> and sbxc<id>, chains SBX-<id>-*) and every iptables rule
// carries the comment sbx:<id>, so that garbage collection can find them;
// so are Docker's containers (sbx-<id> and sbx-<id>-pause, labelled
// DockerLabelSandbox=<id>).
package sandbox
