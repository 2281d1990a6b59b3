package secretscrub

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// Errors CopyFrames returns for frames it will not pass on: it cannot
// look into them, or they break RFC 6455.
var (
	// ErrFrameExtension is a frame with an RSV bit set: an extension
	// (permessage-deflate compresses the payload) the gateway cannot look
	// into.
	ErrFrameExtension = errors.New("a WebSocket frame uses an extension (an RSV bit is set), which the gateway cannot look into for secrets")
	// ErrFrameProtocol is a frame that breaks RFC 6455.
	ErrFrameProtocol = errors.New("a malformed WebSocket frame")
)

// frameChunk is the most payload read at once; a frame longer than this
// goes on as several fragments.
const frameChunk = 16 << 10

// maxControlPayload is the longest a control frame's payload may be
// (RFC 6455 §5.5).
const maxControlPayload = 125

// CopyFrames copies the WebSocket frames a server sends (RFC 6455) from
// r to w until r ends or fails, every value replaced with its placeholder
// in every data message (a value split across frames or fragments
// included) and in every control frame, calling found (when not nil) with
// the name of each secret replaced. Since a placeholder's length is not
// its value's, frames are written anew: a data frame goes on as one or
// more fragments of its message (a long one, or one whose bytes at its
// end could be the start of a value, as more than one), each written
// with one Write as soon as its payload was read; a control frame whose
// payload grows past 125 bytes is cut there. It returns the bytes
// written, and nil when r ended between frames, ErrFrameExtension for a
// frame with an RSV bit set (nothing of it is written), ErrFrameProtocol
// (wrapped) for a frame that breaks RFC 6455, io.ErrUnexpectedEOF for r
// ending inside a frame, or the error of r or w.
func (s *Scrubber) CopyFrames(w io.Writer, r io.Reader, found func(name string)) (written int64, err error) {
	var (
		hdr     [14]byte
		payload = make([]byte, frameChunk)
		out     bytes.Buffer
		frame   []byte
		inMsg   bool // a data message's fragments are coming
		msgOp   byte // its opcode, 1 (text) or 2 (binary)
		opSent  bool // its first fragment was written, with msgOp
	)
	sw := s.NewWriter(&out, found)
	emit := func(fin bool, op byte, p []byte) error {
		b0 := op
		if fin {
			b0 |= 0x80
		}
		frame = append(frame[:0], b0)
		switch n := len(p); {
		case n <= 125:
			frame = append(frame, byte(n))
		case n <= 0xffff:
			frame = append(frame, 126)
			frame = binary.BigEndian.AppendUint16(frame, uint16(n))
		default:
			frame = append(frame, 127)
			frame = binary.BigEndian.AppendUint64(frame, uint64(n))
		}
		frame = append(frame, p...)
		m, err := w.Write(frame)
		written += int64(m)
		return err
	}
	for {
		if _, err := io.ReadFull(r, hdr[:2]); err != nil {
			if err == io.EOF {
				return written, nil
			}
			return written, err
		}
		fin, rsv, op := hdr[0]&0x80 != 0, hdr[0]&0x70, hdr[0]&0x0f
		masked, n := hdr[1]&0x80 != 0, uint64(hdr[1]&0x7f)
		if rsv != 0 {
			return written, ErrFrameExtension
		}
		var ext []byte
		switch n {
		case 126:
			ext = hdr[2:4]
		case 127:
			ext = hdr[2:10]
		}
		if _, err := io.ReadFull(r, ext); err != nil {
			return written, unexpected(err)
		}
		switch len(ext) {
		case 2:
			n = uint64(binary.BigEndian.Uint16(ext))
		case 8:
			n = binary.BigEndian.Uint64(ext)
			if n>>63 != 0 {
				return written, fmt.Errorf("%w: a payload length with its top bit set", ErrFrameProtocol)
			}
		}
		var key [4]byte
		if masked { // a server must not mask; unmasked, it is read all the same
			if _, err := io.ReadFull(r, key[:]); err != nil {
				return written, unexpected(err)
			}
		}
		var pos uint64 // of the payload, for the mask
		unmask := func(p []byte) {
			if masked {
				for i := range p {
					p[i] ^= key[(pos+uint64(i))&3]
				}
			}
			pos += uint64(len(p))
		}

		if op >= 8 { // control: whole, never fragmented, at most 125 bytes
			if !fin || n > maxControlPayload || op > 10 {
				return written, fmt.Errorf("%w: control frame %#x, %d bytes, fin %v", ErrFrameProtocol, op, n, fin)
			}
			p := payload[:n]
			if _, err := io.ReadFull(r, p); err != nil {
				return written, unexpected(err)
			}
			unmask(p)
			if op == 8 && len(p) > 2 { // a close: a code, then a reason
				p = append(p[:2:2], s.String(string(p[2:]), found)...)
			} else {
				p = []byte(s.String(string(p), found))
			}
			if err := emit(true, op, p[:min(len(p), maxControlPayload)]); err != nil {
				return written, err
			}
			continue
		}
		switch {
		case op == 1 || op == 2:
			if inMsg {
				return written, fmt.Errorf("%w: a new message before the last one's final fragment", ErrFrameProtocol)
			}
			inMsg, msgOp, opSent = true, op, false
		case op == 0:
			if !inMsg {
				return written, fmt.Errorf("%w: a continuation frame outside a message", ErrFrameProtocol)
			}
		default:
			return written, fmt.Errorf("%w: reserved opcode %#x", ErrFrameProtocol, op)
		}
		left := n
		for {
			c := payload[:min(left, frameChunk)]
			if _, err := io.ReadFull(r, c); err != nil {
				return written, unexpected(err)
			}
			unmask(c)
			left -= uint64(len(c))
			sw.Write(c) // into out: cannot fail
			last := left == 0 && fin
			if last {
				sw.Flush()
			}
			if out.Len() > 0 || last {
				fop := byte(0)
				if !opSent {
					fop, opSent = msgOp, true
				}
				if err := emit(last, fop, out.Bytes()); err != nil {
					return written, err
				}
				out.Reset()
			}
			if left == 0 {
				break
			}
		}
		if fin {
			inMsg = false
		}
	}
}

// unexpected is err, io.ErrUnexpectedEOF when r ended inside a frame.
func unexpected(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}
