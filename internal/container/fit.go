package container

import (
	"bytes"
	"database/sql"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// fit is what one column accepts, read from information_schema when the
// container opens. Writes are checked against it before any SQL, so a value
// the server would refuse gets a clear error naming the column, and a
// write-behind (acknowledged before it reaches the table) is refused up front
// rather than failing later. The server's strict mode remains the last word
// (a DECIMAL's precision, say, is checked only there).
type fit struct {
	column    string
	maxChars  int64 // characters (text) or bytes (binary); 0 = unchecked
	maxOctets int64 // bytes; 0 = unchecked
	text      bool  // lengths count characters
	utf8      bool  // the column's character set is utf8/utf8mb3/utf8mb4: values must be valid UTF-8
	intBits   int   // an integer column's width in bits; 0 for other types
	unsigned  bool
	// readBack is how a value written to the column comes back from a SELECT (see asStored).
	readBack readBack
}

// readBack is how a column returns what was written to it, under the strict sql_mode containers run with.
type readBack uint8

const (
	readUnknown   readBack = iota // a type keyway does not model (DECIMAL, dates, ENUM, JSON, …): read it back
	readSame                      // the bytes written: VARCHAR, TEXT, VARBINARY, BLOB in utf8 or binary
	readSameASCII                 // the bytes written when they are ASCII: text in another character set
	readTrimmed                   // CHAR: trailing spaces removed (no PAD_CHAR_TO_FULL_LENGTH)
	readPadded                    // BINARY(n): zero bytes appended up to n
	readInteger                   // integers: the number in canonical decimal ("+5" and "007" read back as "5", "7")
)

var intBits = map[string]int{"tinyint": 8, "smallint": 16, "mediumint": 24, "int": 32, "integer": 32, "bigint": 64}

func fitOf(name string, c column) fit {
	f := fit{column: name, intBits: intBits[c.dataType], unsigned: strings.Contains(c.colType, "unsigned")}
	if f.intBits != 0 {
		f.readBack = readInteger
		return f
	}
	f.maxChars, f.maxOctets = nullInt(c.maxChars), nullInt(c.maxOctets)
	switch c.dataType {
	case "char", "varchar", "tinytext", "text", "mediumtext", "longtext":
		f.text = true
		coll := strings.ToLower(c.collation.String)
		f.utf8 = c.collation.Valid && strings.HasPrefix(coll, "utf8")
		// Values reach the server as utf8mb4 text and are converted to the column's character set; only UTF-8
		// columns (and ASCII in any other, all of them ASCII supersets here) give the same bytes back.
		f.readBack = readSameASCII
		if f.utf8 {
			f.readBack = readSame
		}
		if c.dataType == "char" {
			f.readBack = readTrimmed
			if !f.utf8 {
				f.readBack = readUnknown // trimming and conversion together: not worth modelling
			}
		}
	case "varbinary", "tinyblob", "blob", "mediumblob", "longblob":
		f.readBack = readSame
	case "binary":
		f.readBack = readPadded
	}
	return f
}

// asStored returns v as a SELECT of the column returns it after v was written, and false when keyway does not
// know (a type it does not model, or a conversion it does not reproduce). v has passed checkBytes.
func (f fit) asStored(v []byte) ([]byte, bool) {
	switch f.readBack {
	case readSame:
		return v, true
	case readSameASCII:
		for _, b := range v {
			if b >= utf8.RuneSelf {
				return nil, false
			}
		}
		return v, true
	case readTrimmed:
		return bytes.TrimRight(v, " "), true
	case readPadded:
		if int64(len(v)) >= f.maxOctets {
			return v, true
		}
		return append(bytes.Clone(v), make([]byte, f.maxOctets-int64(len(v)))...), true
	case readInteger:
		if f.unsigned {
			n, err := strconv.ParseUint(string(v), 10, 64)
			return strconv.AppendUint(nil, n, 10), err == nil
		}
		n, err := strconv.ParseInt(string(v), 10, 64)
		return strconv.AppendInt(nil, n, 10), err == nil
	}
	return nil, false
}

func nullInt(n sql.NullInt64) int64 {
	if n.Valid {
		return n.Int64
	}
	return 0
}

// checkBytes reports why v does not fit the column (nil when it does).
func (f fit) checkBytes(v []byte) error {
	if f.intBits != 0 {
		if f.unsigned {
			n, err := strconv.ParseUint(string(v), 10, 64)
			if err != nil {
				return fmt.Errorf("%w: column %s is an unsigned integer, value %.40q is not", ErrValueType, f.column, v)
			}
			return f.checkUint(n)
		}
		n, err := strconv.ParseInt(string(v), 10, 64)
		if err != nil {
			return fmt.Errorf("%w: column %s is an integer, value %.40q is not", ErrValueType, f.column, v)
		}
		return f.checkInt(n)
	}
	if f.utf8 && !utf8.Valid(v) {
		return fmt.Errorf("%w: column %s takes UTF-8 text and the value is not valid UTF-8", ErrValueType, f.column)
	}
	n := int64(len(v))
	if f.text {
		n = int64(utf8.RuneCount(v))
	}
	if f.maxChars > 0 && n > f.maxChars || f.maxOctets > 0 && int64(len(v)) > f.maxOctets {
		unit := "bytes"
		if f.text {
			unit = "characters"
		}
		return fmt.Errorf("%w: column %s holds %d %s, the value has %d", ErrValueTooLong, f.column, f.maxChars, unit, n)
	}
	return nil
}

// checkInt reports whether n is in the integer column's range.
func (f fit) checkInt(n int64) error {
	if f.intBits == 0 || f.intBits == 64 && !f.unsigned {
		return nil
	}
	if f.unsigned {
		if n < 0 {
			return f.outOfRange(strconv.FormatInt(n, 10))
		}
		return f.checkUint(uint64(n))
	}
	lim := int64(1) << (f.intBits - 1)
	if n < -lim || n >= lim {
		return f.outOfRange(strconv.FormatInt(n, 10))
	}
	return nil
}

func (f fit) checkUint(n uint64) error {
	if f.intBits == 0 || f.intBits == 64 {
		if !f.unsigned && n > 1<<63-1 {
			return f.outOfRange(strconv.FormatUint(n, 10))
		}
		return nil
	}
	bits := f.intBits
	if !f.unsigned {
		bits--
	}
	if n >= uint64(1)<<bits {
		return f.outOfRange(strconv.FormatUint(n, 10))
	}
	return nil
}

func (f fit) outOfRange(v string) error {
	kind := "signed"
	if f.unsigned {
		kind = "unsigned"
	}
	return fmt.Errorf("%w: %s is out of range for column %s (%d-bit %s)", ErrValueType, v, f.column, f.intBits, kind)
}
