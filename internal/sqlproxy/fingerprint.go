package sqlproxy

// This file computes a statement's fingerprint: the 64-bit key of the plan cache and of the digest statistics.
//
// The job: tell, in one pass over the text and without allocating, whether two statements differ only in their
// literals. It is a small tokenizer in the manner of ProxySQL's query digest: literals (numbers, quoted strings,
// x'..'/b'..'/n'..') become one marker, a pure-literal IN (…) list of two or more becomes one marker, comments and
// whitespace runs vanish, unquoted words are folded to lower case; the token stream is hashed as it is produced.
// TiDB's parser.NormalizeDigest (about 1 µs and 8 allocations) then runs only once per new fingerprint, for display.
//
// Invariants:
//   - Never coarser than TiDB's normalization where the plan could differ: two statements that share a
//     fingerprint parse to the same plan. So it keeps what changes meaning and TiDB keeps too (words, operators,
//     quoted identifiers verbatim), and is finer where that is cheap and safe: a "?" placeholder is not a literal
//     (the plan's KeyRef tells Param from Literal), the count of literals before a non-literal IN element is
//     hashed, an identifier that starts with a digit ("1t") is a word, and executable or hint comments
//     ("/*!…*/", "/*M!…*/", "/*T!…*/", "/*+…*/", keyway's cache hints among them) are hashed verbatim.
//   - Collisions: the hash is hash/maphash with the plan cache's random seed, never shown or stored outside the
//     process, so a client cannot aim at a collision, and the chance of an accidental one is about n²/2⁶⁵ for n
//     distinct statements. A collision could only mis-plan (the result cache keys on the statement text and
//     parameters, cache.go), and keyway accepts that, as ProxySQL does.
//   - Like TiDB's lexer, strings take backslash escapes (sql_mode NO_BACKSLASH_ESCAPES is not tracked).

import "hash/maphash"

// Token kinds, for deciding where a whitespace run must be kept as a separator.
const (
	tokNone = iota
	tokWord // words, literals, quoted identifiers: "a b" must differ from "ab"
	tokPunct
)

// Markers written for what was erased. The control bytes never come bare from the text (fingerprint escapes them).
const (
	fpLiteral     = '?'
	fpPlaceholder = 0x01 // a "?" parameter marker, kept apart from literals
	fpList        = 0x02 // a collapsed IN list of literals
	fpListCount   = 0x03 // followed by the count of literals before a non-literal IN list element
)

type fingerprinter struct {
	h       maphash.Hash
	last    int  // kind of the last token written
	space   bool // whitespace (or a comment) since the last token
	inWord  bool // the last token was the word "in": a following "(" may open a literal list
	lastAt  bool // the last token was "@"
	list    int  // 0: not in an IN list; 1: just after "in ("; 2: after literals; 3: after "literal ,"
	swallow int  // literals swallowed in the current IN list

	// spans, when not nil, records where each literal is in the text (literalSpans); collapsed notes an IN list
	// of several literals, which hashes alike whatever their number.
	spans     *[][2]int
	collapsed bool
}

// fingerprint returns sql's fingerprint under seed (see the file comment).
func fingerprint(seed maphash.Seed, sql string) uint64 {
	var f fingerprinter
	return f.run(seed, sql)
}

// literalSpans returns where sql's literals are, in text order, as the fingerprint sees them, and whether an IN
// list of several literals collapsed (then statements of one fingerprint may differ in their number of literals).
// Two statements of one fingerprint without such a list have their literals at the same places of the same
// token stream, so the Nth literal of one stands where the Nth of the other does (Plan.keyToken relies on it).
func literalSpans(sql string) (spans [][2]int, collapsed bool) {
	f := fingerprinter{spans: &spans}
	f.run(maphash.Seed{}, sql)
	return spans, f.collapsed
}

func (f *fingerprinter) run(seed maphash.Seed, sql string) uint64 {
	if seed != (maphash.Seed{}) {
		f.h.SetSeed(seed)
	}
	n := len(sql)
	for i := 0; i < n; {
		c := sql[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v':
			f.space = true
			i++
		case c == '#':
			i = skipLine(sql, i)
			f.space = true
		case c == '-' && i+1 < n && sql[i+1] == '-' && (i+2 == n || sql[i+2] <= ' '): // "-- " comment; "--1" is not
			i = skipLine(sql, i)
			f.space = true
		case c == '/' && i+1 < n && sql[i+1] == '*':
			end := commentEnd(sql, i+2)
			if i+2 < n && (sql[i+2] == '!' || sql[i+2] == '+' ||
				i+3 < n && (sql[i+2] == 'M' || sql[i+2] == 'T') && sql[i+3] == '!') {
				f.token(tokPunct, 0)
				f.h.WriteString(sql[i:end]) // executable code or a hint: hashed as written
			} else {
				f.space = true
			}
			i = end
		case c == '\'' || c == '"':
			start := i
			i = skipQuoted(sql, i+1, c)
			f.literal(start, i)
		case c == '`':
			j := skipQuoted(sql, i+1, c)
			f.token(tokWord, 0)
			f.h.WriteString(sql[i:j])
			i = j
		case c == '?':
			f.token(tokWord, fpPlaceholder)
			i++
		case c == '.' && i+1 < n && isDigit(sql[i+1]) && !(f.last == tokWord && !f.space):
			start := i
			i = skipNumberTail(sql, i)
			f.literal(start, i)
		case isWordByte(c):
			j := i
			for j < n && isWordByte(sql[j]) {
				j++
			}
			word := sql[i:j]
			if (j < n && sql[j] == '\'') && len(word) == 1 && (c|0x20 == 'x' || c|0x20 == 'b' || c|0x20 == 'n') {
				start := i
				i = skipQuoted(sql, j+1, '\'') // x'41', b'01', n'text'
				f.literal(start, i)
				continue
			}
			if isDigit(c) {
				if k, ok := numberEnd(sql, i, j); ok {
					f.literal(i, k)
					i = k
					continue
				}
			}
			f.word(word)
			i = j
		case c < 0x20: // a control byte: escaped, so that it cannot pass for one of the markers
			f.token(tokPunct, 0)
			f.h.WriteByte(0)
			f.h.WriteByte(c)
			i++
		default:
			f.token(tokPunct, c)
			i++
		}
	}
	if f.list == 2 || f.list == 3 { // unterminated list: keep what was swallowed apart
		f.flushList()
	}
	return f.h.Sum64()
}

// token writes the start of a token of kind k (and b, when not 0), keeping a separator where a whitespace run
// split two tokens of one kind, and ends or flushes an IN list the token does not belong to.
func (f *fingerprinter) token(k int, b byte) {
	prevIn := f.inWord
	switch {
	case f.list == 0:
	case f.list == 1:
		f.list = 0 // "in (" followed by something other than a literal: an ordinary parenthesis
	case f.list == 2 && b == ')':
		// "in (literals)": one marker whatever their number; one literal stays apart, as in TiDB's digest
		if f.swallow == 1 {
			f.h.WriteByte(fpLiteral)
		} else {
			f.h.WriteByte(fpList)
			f.collapsed = true
		}
		f.list, f.swallow = 0, 0
	case f.list == 2 && b == ',':
		f.list = 3
		return
	default: // a list that is not only literals ("in (1, a)"), or does not parse ("in (1,)")
		f.flushList()
	}
	// Whitespace between a word and an operator changes nothing ("a=1", "a = 1"), except after "@": "@a" is a
	// variable, "@ a" is not.
	if f.space && (f.last == k && k != tokNone || f.lastAt) {
		f.h.WriteByte(' ')
	}
	f.space = false
	f.last = k
	f.lastAt = b == '@'
	f.inWord = false
	if b != 0 {
		f.h.WriteByte(b)
		if b == '(' && prevIn {
			f.list = 1
		}
	}
}

// flushList writes the literals an IN list swallowed before an element that is not a literal, with their count.
func (f *fingerprinter) flushList() {
	f.h.WriteByte(fpListCount)
	n := f.swallow
	for n >= 0x80 {
		f.h.WriteByte(byte(n) | 0x80)
		n >>= 7
	}
	f.h.WriteByte(byte(n))
	if f.list == 3 {
		f.h.WriteByte(',')
	}
	f.list, f.swallow = 0, 0
	f.last = tokPunct
}

// literal writes one literal, sql[start:end], or swallows it inside an IN list.
func (f *fingerprinter) literal(start, end int) {
	if f.spans != nil {
		*f.spans = append(*f.spans, [2]int{start, end})
	}
	if f.list == 1 || f.list == 3 {
		f.list = 2
		f.swallow++
		f.space = false
		f.last = tokWord
		f.inWord = false
		return
	}
	f.token(tokWord, fpLiteral)
}

// word writes an unquoted word folded to ASCII lower case, and notes whether it is "in".
func (f *fingerprinter) word(w string) {
	f.token(tokWord, 0)
	for i := 0; i < len(w); i++ {
		c := w[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		f.h.WriteByte(c)
	}
	f.inWord = len(w) == 2 && w[0]|0x20 == 'i' && w[1]|0x20 == 'n'
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

// isWordByte: identifier and number characters (any byte of a multi-byte UTF-8 sequence included).
func isWordByte(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || isDigit(c) || c == '_' || c == '$' || c >= 0x80
}

// numberEnd: sql[i:j] is a word starting with a digit; if it begins a numeric literal (123, 1.5, 1e-3, 0x1F,
// 0b101), numberEnd returns where the literal ends. A word such as "1t" is an identifier.
func numberEnd(sql string, i, j int) (int, bool) {
	w := sql[i:j]
	if len(w) > 2 && w[0] == '0' && (w[1] == 'x' || w[1] == 'b') {
		for k := 2; k < len(w); k++ {
			c := w[k] | 0x20
			if !(w[1] == 'x' && (isDigit(w[k]) || 'a' <= c && c <= 'f') || w[1] == 'b' && (w[k] == '0' || w[k] == '1')) {
				return 0, false
			}
		}
		return j, true
	}
	k := i
	for k < j && isDigit(sql[k]) {
		k++
	}
	if k < j { // digits then letters: only an exponent keeps it a number
		if sql[k]|0x20 != 'e' {
			return 0, false
		}
		if k+1 == j && j+1 < len(sql) && (sql[j] == '+' || sql[j] == '-') && isDigit(sql[j+1]) {
			return skipDigits(sql, j+1), true // 1e+5
		}
		for m := k + 1; m < j; m++ {
			if !isDigit(sql[m]) {
				return 0, false
			}
		}
		if k+1 == j {
			return 0, false // "1e" alone is an identifier
		}
		return j, true
	}
	if j < len(sql) && sql[j] == '.' {
		return skipNumberTail(sql, j), true
	}
	return j, true
}

// skipNumberTail skips ".digits" and an optional exponent from sql[i] == '.'.
func skipNumberTail(sql string, i int) int {
	i = skipDigits(sql, i+1)
	if i < len(sql) && sql[i]|0x20 == 'e' {
		k := i + 1
		if k < len(sql) && (sql[k] == '+' || sql[k] == '-') {
			k++
		}
		if k < len(sql) && isDigit(sql[k]) {
			i = skipDigits(sql, k)
		}
	}
	return i
}

func skipDigits(sql string, i int) int {
	for i < len(sql) && isDigit(sql[i]) {
		i++
	}
	return i
}

// skipQuoted returns the index after the quote q closing a quoted run starting at i (doubled quotes and, except
// in backquotes, backslash escapes stay inside); len(sql) when unterminated.
func skipQuoted(sql string, i int, q byte) int {
	for i < len(sql) {
		switch c := sql[i]; {
		case c == '\\' && q != '`':
			i += 2
		case c == q:
			if i+1 < len(sql) && sql[i+1] == q {
				i += 2
				continue
			}
			return i + 1
		default:
			i++
		}
	}
	return len(sql)
}

// commentEnd returns the index after the "*/" closing a comment whose body starts at i; len(sql) when unterminated.
func commentEnd(sql string, i int) int {
	for ; i+1 < len(sql); i++ {
		if sql[i] == '*' && sql[i+1] == '/' {
			return i + 2
		}
	}
	return len(sql)
}

// skipLine returns the index of the newline ending the line at i (or len(sql)).
func skipLine(sql string, i int) int {
	for i < len(sql) && sql[i] != '\n' {
		i++
	}
	return i
}
