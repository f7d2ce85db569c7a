package admissionio

import (
	"bytes"
	"encoding/json"
	"strconv"
)

// rawObjectAt reports whether raw holds a JSON object at the path segs
// (index[i] marks segs[i] as an array index). It walks raw's bytes without
// decoding or allocating (only a key with escapes is unquoted), because the
// differ asks it on the webhook's hot path. Malformed JSON answers false:
// the parent is then written whole, which is always applicable.
func rawObjectAt(raw []byte, segs []string, index []bool) bool {
	s := jsonScanner{b: raw}
	for i, seg := range segs {
		var ok bool
		if index[i] {
			n, err := strconv.Atoi(seg)
			ok = err == nil && s.element(n)
		} else {
			ok = s.member(seg)
		}
		if !ok {
			return false
		}
	}
	s.space()
	return s.peek() == '{'
}

// jsonScanner is a cursor over JSON text.
type jsonScanner struct {
	b []byte
	i int
}

func (s *jsonScanner) peek() byte {
	if s.i < len(s.b) {
		return s.b[s.i]
	}
	return 0
}

func (s *jsonScanner) space() {
	for s.i < len(s.b) && (s.b[s.i] == ' ' || s.b[s.i] == '\t' || s.b[s.i] == '\n' || s.b[s.i] == '\r') {
		s.i++
	}
}

// expect consumes c (after white space) and reports whether it was there.
func (s *jsonScanner) expect(c byte) bool {
	s.space()
	if s.peek() != c {
		return false
	}
	s.i++
	return true
}

// member moves the cursor into an object, to the value of key.
func (s *jsonScanner) member(key string) bool {
	if !s.expect('{') {
		return false
	}
	for first := true; ; first = false {
		s.space()
		if s.peek() == '}' || (!first && !s.expect(',')) {
			return false
		}
		k, ok := s.str()
		if !ok || !s.expect(':') {
			return false
		}
		if keyIs(k, key) {
			return true
		}
		if !s.skip() {
			return false
		}
	}
}

// element moves the cursor into an array, to its n-th element.
func (s *jsonScanner) element(n int) bool {
	if !s.expect('[') {
		return false
	}
	for j := 0; ; j++ {
		s.space()
		if s.peek() == ']' || (j > 0 && !s.expect(',')) {
			return false
		}
		if j == n {
			return true
		}
		if !s.skip() {
			return false
		}
	}
}

// str consumes a string and returns it quoted, as it is in raw.
func (s *jsonScanner) str() ([]byte, bool) {
	s.space()
	if s.peek() != '"' {
		return nil, false
	}
	start := s.i
	for s.i++; s.i < len(s.b); s.i++ {
		switch s.b[s.i] {
		case '\\':
			s.i++
		case '"':
			s.i++
			return s.b[start:s.i], true
		}
	}
	return nil, false
}

// skip consumes one value of any type.
func (s *jsonScanner) skip() bool {
	s.space()
	switch s.peek() {
	case '"':
		_, ok := s.str()
		return ok
	case '{', '[':
		return s.skipNested()
	}
	start := s.i
	for s.i < len(s.b) && !endsScalar(s.b[s.i]) {
		s.i++
	}
	return s.i > start
}

// skipNested consumes an object or array, strings inside included.
func (s *jsonScanner) skipNested() bool {
	depth := 0
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case '"':
			if _, ok := s.str(); !ok {
				return false
			}
			continue
		case '{', '[':
			depth++
		case '}', ']':
			depth--
			if depth == 0 {
				s.i++
				return true
			}
		}
		s.i++
	}
	return false
}

// keyIs compares a quoted key from raw with key, unquoting only when the
// key has escapes.
func keyIs(quoted []byte, key string) bool {
	if len(quoted) < 2 {
		return false
	}
	inner := quoted[1 : len(quoted)-1]
	if bytes.IndexByte(inner, '\\') < 0 {
		return string(inner) == key
	}
	var k string
	return json.Unmarshal(quoted, &k) == nil && k == key
}

// endsScalar reports whether c ends a number or literal.
func endsScalar(c byte) bool {
	switch c {
	case ',', '}', ']', ' ', '\t', '\n', '\r':
		return true
	}
	return false
}
