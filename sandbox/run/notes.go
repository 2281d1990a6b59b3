package run

// A Note is something a caller may want to tell its user, which Start and
// Close pass to Spec.Notes as it happens: UserChosen, NoInit, Closed,
// NotKept and Recorded.
type Note interface{ isNote() }

// UserChosen says who the command will run as, before anything is made.
type UserChosen struct{ User User }

// AgentMissing says that none of the paths of the home that show
// RootFS.Agent's install and settings (rootfs.Agents, and an npm -g
// install in a prefix of the home) exists in Home: the sandbox shows
// nothing of that agent.
type AgentMissing struct{ Agent, Home string }

// NoInit says that no init (tini) was found: the command runs as PID 1,
// which ignores SIGTERM unless it handles it.
type NoInit struct{}

// Closed says that the sandbox and its gateway are gone, so its decision
// log is complete: ID's log is LogFile, and its mocks' journal
// JournalFile ("" when it mocked no LLM).
type Closed struct{ ID, LogFile, JournalFile string }

// NotKept says that the record of the ended sandbox ID (Ended) could
// not be written: sbx ps -a does not list it, and it is found by id
// only where its log is in the log directory.
type NotKept struct {
	ID  string
	Err error
}

// Recorded says that a recording's script was written, with Exchanges
// exchanges.
type Recorded struct {
	Host, Path string
	Exchanges  int
}

func (UserChosen) isNote()   {}
func (NoInit) isNote()       {}
func (AgentMissing) isNote() {}
func (Closed) isNote()       {}
func (Recorded) isNote()     {}
func (NotKept) isNote()      {}
