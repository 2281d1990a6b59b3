// Package rootfs decides what a sandbox's container sees as / (docs/rootfs.md)
// : the host's own system directories read-only with secrets masked
// (the default), with the user's home shown as HomeView says and its
// CredentialStores replaced by empty ones (docs/home.md), or a directory
// of the user's. It returns a Layout, plain
// data that the sandbox package turns into a container spec; it imports no
// other package of sbx.
package rootfs
