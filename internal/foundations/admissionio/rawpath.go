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

// span is the bytes [start, end) of one JSON value in a document.
type span struct{ start, end int }

// reviewObjects finds the values of request.object and request.oldObject
// in an AdmissionReview, as the decoder takes them: the last of duplicate
// members, of the last "request". ok is false when body is not an object
// of that shape the scanner can follow; the caller then decodes it whole.
func reviewObjects(body []byte) (objects [2]span, found [2]bool, ok bool) {
	s := jsonScanner{b: body}
	if !s.expect('{') {
		return objects, found, false
	}
	for first := true; ; first = false {
		s.space()
		if s.peek() == '}' {
			s.i++
			s.space()
			return objects, found, s.i == len(s.b)
		}
		if !first && !s.expect(',') {
			return objects, found, false
		}
		k, isStr := s.str()
		if !isStr || !s.expect(':') {
			return objects, found, false
		}
		if !keyIs(k, "request") {
			if !s.skip() {
				return objects, found, false
			}
			continue
		}
		// A later request replaces an earlier one, objects and all.
		found = [2]bool{}
		s.space()
		if s.peek() != '{' {
			if !s.skip() {
				return objects, found, false
			}
			continue
		}
		if !s.requestObjects(&objects, &found) {
			return objects, found, false
		}
	}
}

// requestObjects walks the request object at the cursor, recording where
// its object and oldObject values are.
func (s *jsonScanner) requestObjects(objects *[2]span, found *[2]bool) bool {
	s.i++ // the '{'
	for first := true; ; first = false {
		s.space()
		if s.peek() == '}' {
			s.i++
			return true
		}
		if !first && !s.expect(',') {
			return false
		}
		k, isStr := s.str()
		if !isStr || !s.expect(':') {
			return false
		}
		s.space()
		start := s.i
		if !s.skip() {
			return false
		}
		switch {
		case keyIs(k, "object"):
			objects[0], found[0] = span{start, s.i}, true
		case keyIs(k, "oldObject"):
			objects[1], found[1] = span{start, s.i}, true
		}
	}
}
