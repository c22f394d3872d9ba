package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
)

// This file reads JSON into a tree that remembers where every value and
// every object key starts, so that validation errors can name the line. The
// standard library's decoder only reports offsets for syntax errors; its
// Token API, with Decoder.InputOffset, gives the rest.

// kind is a JSON value's type.
type kind int8

const (
	kindNull kind = iota
	kindBool
	kindNumber
	kindString
	kindArray
	kindObject
)

// String names a kind the way error messages do: "want an integer, got a
// string".
func (k kind) String() string {
	return [...]string{"null", "true or false", "a number", "a string", "an array", "an object"}[k]
}

// node is one JSON value and the byte offset where it starts.
type node struct {
	kind    kind
	off     int
	boolean bool
	text    string // a string's value, or a number's literal
	elems   []*node
	members []member
}

// member is one key of an object, with the offset of the key itself.
type member struct {
	key string
	off int
	val *node
}

// commentKey reports whether an object key is a comment. JSON has no
// comments, so the configuration reserves keys beginning with "//" for them:
// they may hold any value, may repeat, and are never read.
func commentKey(k string) bool { return strings.HasPrefix(k, "//") }

// problem is one error found in a configuration file.
type problem struct {
	line, col int    // col is 0 except for syntax errors
	path      string // the field at fault, "" for syntax errors
	msg       string
}

// Error is the error returned for an invalid configuration file. It lists
// every problem found, one per line, ordered by line:
//
//	config.json:12: routes[1].limit.burst: must be at least 1
type Error struct {
	File     string
	problems []problem
}

func (e *Error) Error() string {
	var b strings.Builder
	for i, p := range e.problems {
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(e.File)
		b.WriteByte(':')
		b.WriteString(strconv.Itoa(p.line))
		if p.col > 0 {
			b.WriteByte(':')
			b.WriteString(strconv.Itoa(p.col))
		}
		b.WriteString(": ")
		if p.path != "" {
			b.WriteString(p.path)
			b.WriteString(": ")
		}
		b.WriteString(p.msg)
	}
	return b.String()
}

// maxProblems bounds how many problems one error lists.
const maxProblems = 20

// source is a configuration file being read: its name, its bytes and the
// problems found so far.
type source struct {
	name     string
	data     []byte
	problems []problem
}

// lineCol converts a byte offset to a 1-based line and column.
func (s *source) lineCol(off int) (line, col int) {
	off = min(max(off, 0), len(s.data))
	before := s.data[:off]
	line = 1 + bytes.Count(before, []byte{'\n'})
	col = off - bytes.LastIndexByte(before, '\n')
	return line, col
}

// errorf records a problem with the field at path, at byte offset off.
func (s *source) errorf(off int, path, format string, args ...any) {
	line, _ := s.lineCol(off)
	s.problems = append(s.problems, problem{line: line, path: path, msg: fmt.Sprintf(format, args...)})
}

// err returns the problems found as an *Error, or nil.
func (s *source) err() error {
	if len(s.problems) == 0 {
		return nil
	}
	ps := append([]problem(nil), s.problems...)
	sort.SliceStable(ps, func(i, j int) bool { return ps[i].line < ps[j].line })
	if len(ps) > maxProblems {
		ps = append(ps[:maxProblems], problem{line: ps[maxProblems].line, msg: fmt.Sprintf("and %d more problems", len(ps)-maxProblems)})
	}
	return &Error{File: s.name, problems: ps}
}

// parseTree reads s.data as one JSON value. It fails with an *Error naming
// the line and column of a syntax error.
func (s *source) parseTree() (*node, error) {
	p := treeParser{src: s, dec: json.NewDecoder(bytes.NewReader(s.data))}
	p.dec.UseNumber()
	n, err := p.value()
	if err == nil {
		off := p.next()
		if _, terr := p.dec.Token(); terr != io.EOF {
			if terr != nil {
				err = p.wrap(terr)
			} else {
				err = p.syntax(off, "unexpected data after the top-level object")
			}
		}
	}
	if err != nil {
		var pe *posError
		if !errors.As(err, &pe) {
			pe = p.wrap(err)
		}
		return nil, pe.toError(s)
	}
	return n, nil
}

// posError is a syntax error at a byte offset.
type posError struct {
	off int
	msg string
}

func (e *posError) Error() string { return e.msg }

func (e *posError) toError(s *source) error {
	line, col := s.lineCol(e.off)
	return &Error{File: s.name, problems: []problem{{line: line, col: col, msg: e.msg}}}
}

type treeParser struct {
	src *source
	dec *json.Decoder
}

// next returns the offset where the next token starts: the decoder's
// offset moved past white space and the separators the decoder consumes
// along with the next token.
func (p *treeParser) next() int {
	off := int(p.dec.InputOffset())
	for off < len(p.src.data) {
		switch p.src.data[off] {
		case ' ', '\t', '\r', '\n', ',', ':':
			off++
			continue
		}
		break
	}
	return off
}

func (p *treeParser) syntax(off int, msg string) *posError {
	return &posError{off: off, msg: "syntax error: " + msg}
}

// wrap turns a decoder error into a syntax error with a position.
func (p *treeParser) wrap(err error) *posError {
	var se *json.SyntaxError
	switch {
	case errors.As(err, &se):
		// A Decoder's Offset counts the bytes before the offending one.
		return p.syntax(int(se.Offset), se.Error())
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		if len(bytes.TrimSpace(p.src.data)) == 0 {
			return p.syntax(0, "the file is empty")
		}
		return p.syntax(len(p.src.data), "unexpected end of file")
	}
	return p.syntax(int(p.dec.InputOffset()), err.Error())
}

// value reads one JSON value and everything inside it.
func (p *treeParser) value() (*node, error) {
	off := p.next()
	tok, err := p.dec.Token()
	if err != nil {
		return nil, p.wrap(err)
	}
	n := &node{off: off}
	switch t := tok.(type) {
	case nil:
		n.kind = kindNull
	case bool:
		n.kind, n.boolean = kindBool, t
	case json.Number:
		n.kind, n.text = kindNumber, string(t)
	case string:
		n.kind, n.text = kindString, t
	case json.Delim:
		switch t {
		case '[':
			n.kind = kindArray
			for p.dec.More() {
				e, err := p.value()
				if err != nil {
					return nil, err
				}
				n.elems = append(n.elems, e)
			}
		case '{':
			n.kind = kindObject
			for p.dec.More() {
				koff := p.next()
				kt, err := p.dec.Token()
				if err != nil {
					return nil, p.wrap(err)
				}
				key, _ := kt.(string) // the decoder accepts only strings here
				v, err := p.value()
				if err != nil {
					return nil, err
				}
				n.members = append(n.members, member{key: key, off: koff, val: v})
			}
		}
		if _, err := p.dec.Token(); err != nil { // the closing delimiter
			return nil, p.wrap(err)
		}
	}
	return n, nil
}
