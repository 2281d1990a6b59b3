package main

import (
	"os"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// ttyFile is the controlling terminal, /dev/tty, as a promptTerminal.
// Its reads wait in the runtime's poller, so that a deadline ends them;
// its descriptor is reached through SyscallConn only, as Fd would make it
// blocking and its deadlines void.
type ttyFile struct {
	*os.File
	raw   syscall.RawConn
	saved *unix.Termios // the mode KeyMode(true) found, nil when not in key mode
}

// openPromptTerminal opens the controlling terminal; it fails when the
// process has none (ENXIO).
func openPromptTerminal() (promptTerminal, error) {
	f, err := os.OpenFile("/dev/tty", os.O_RDWR, 0)
	if err != nil {
		return nil, err
	}
	t := &ttyFile{File: f}
	if t.raw, err = f.SyscallConn(); err == nil {
		_, err = t.termios()
	}
	// A read the prompt no longer needs is ended by a deadline; a file
	// outside the poller takes none.
	if err == nil {
		err = f.SetReadDeadline(time.Time{})
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return t, nil
}

// control runs fn with the terminal's descriptor.
func (t *ttyFile) control(fn func(fd int) error) error {
	var ferr error
	if err := t.raw.Control(func(fd uintptr) { ferr = fn(int(fd)) }); err != nil {
		return err
	}
	return ferr
}

func (t *ttyFile) termios() (*unix.Termios, error) {
	var tio *unix.Termios
	err := t.control(func(fd int) (err error) {
		tio, err = unix.IoctlGetTermios(fd, unix.TCGETS)
		return err
	})
	return tio, err
}

func (t *ttyFile) Foreground() bool {
	var pgrp int
	err := t.control(func(fd int) (err error) {
		pgrp, err = unix.IoctlGetInt(fd, unix.TIOCGPGRP)
		return err
	})
	return err == nil && pgrp == unix.Getpgrp()
}

func (t *ttyFile) KeyMode(on bool) error {
	if !on {
		if t.saved == nil {
			return nil
		}
		saved := t.saved
		t.saved = nil
		return t.control(func(fd int) error { return unix.IoctlSetTermios(fd, unix.TCSETS, saved) })
	}
	saved, err := t.termios()
	if err != nil {
		return err
	}
	keys := *saved
	keys.Lflag &^= unix.ICANON | unix.ECHO
	keys.Cc[unix.VMIN], keys.Cc[unix.VTIME] = 1, 0
	// TCSETSF drops the input typed before: no key pressed earlier
	// answers the question.
	if err := t.control(func(fd int) error { return unix.IoctlSetTermios(fd, unix.TCSETSF, &keys) }); err != nil {
		return err
	}
	t.saved = saved
	return nil
}

// isTTY reports whether stream is a terminal (not merely a character
// device, as /dev/null is). Its descriptor is not made blocking.
func isTTY(stream any) bool {
	f, ok := stream.(*os.File)
	if !ok {
		return false
	}
	raw, err := f.SyscallConn()
	if err != nil {
		return false
	}
	return (&ttyFile{File: f, raw: raw}).control(func(fd int) error {
		_, err := unix.IoctlGetTermios(fd, unix.TCGETS)
		return err
	}) == nil
}
