package container

import (
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
}

var intBits = map[string]int{"tinyint": 8, "smallint": 16, "mediumint": 24, "int": 32, "integer": 32, "bigint": 64}

func fitOf(name string, c column) fit {
	f := fit{column: name, intBits: intBits[c.dataType], unsigned: strings.Contains(c.colType, "unsigned")}
	if f.intBits != 0 {
		return f
	}
	f.maxChars, f.maxOctets = nullInt(c.maxChars), nullInt(c.maxOctets)
	switch c.dataType {
	case "char", "varchar", "tinytext", "text", "mediumtext", "longtext":
		f.text = true
		f.utf8 = c.collation.Valid && strings.HasPrefix(strings.ToLower(c.collation.String), "utf8")
	}
	return f
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
