package container

import (
	"strconv"
	"unsafe"
)

// FromImage returns the item a read of key's row returns, built from the row as the binlog images it after a change
// (value gives a column's value, by lower-case name, as go-mysql decodes it). ok is false when keyway cannot tell: a
// column the image lacks or holds as NULL (a MINIMAL image looks the same), a column type whose SELECT keyway does not
// model (see fit.readBack), or a value of a Go type it does not expect. Callers compare the item with a cached copy,
// so false only costs the copy. The item's Value may be the image's own bytes (a view of a string): read it, never
// write into it.
func (c *Container) FromImage(value func(column string) (any, bool)) (it Item, ok bool) {
	if c.sh != nil {
		if p := c.checkedPart(); p != nil {
			return p.FromImage(value)
		}
		return Item{}, false
	}
	if !c.checked.Load() {
		return Item{}, false // valCols are not known yet
	}
	// The follower calls this for every row it sees change: one column (the common container) costs no slice.
	var one [1][]byte
	parts := one[:]
	if len(c.valCols) > 1 {
		parts = make([][]byte, len(c.valCols))
	}
	for i, f := range c.valCols {
		v, ok := value(c.lower.vals[i])
		if !ok || v == nil {
			return Item{}, false
		}
		if parts[i], ok = f.fromImage(v); !ok {
			return Item{}, false
		}
	}
	if len(parts) == 1 {
		it.Value = nonNil(parts[0])
	} else {
		it.Value = joinBytes(parts, c.sep)
	}
	flags, ok := imageColumnInt(value, c.lower.flags)
	if !ok {
		return Item{}, false
	}
	if it.Exptime, ok = imageColumnInt(value, c.lower.exp); !ok {
		return Item{}, false
	}
	it.Flags = uint32(flags)
	if c.lower.cas == "" {
		it.CAS = hashCAS(it.Value, it.Flags)
		return it, true
	}
	v, ok := value(c.lower.cas)
	if !ok {
		return Item{}, false
	}
	switch n := v.(type) {
	case nil:
	case int64:
		it.CAS = uint64(n) // a BIGINT UNSIGNED arrives as its bits, signed
	default:
		cas, ok := imageInt(v)
		if !ok || cas < 0 {
			return Item{}, false
		}
		it.CAS = uint64(cas)
	}
	return it, true
}

// imageColumnInt reads the integer column name ("": a column the container does not have, 0) from the image.
func imageColumnInt(value func(column string) (any, bool), name string) (int64, bool) {
	if name == "" {
		return 0, true
	}
	v, ok := value(name)
	if !ok {
		return 0, false
	}
	return imageInt(v)
}

// imageInt reads an integer column's image as scanItem reads it: NULL is 0.
func imageInt(v any) (int64, bool) {
	switch n := v.(type) {
	case nil:
		return 0, true
	case int8:
		return int64(n), true
	case int16:
		return int64(n), true
	case int32:
		return int64(n), true
	case int64:
		return n, true
	case int:
		return int64(n), true
	}
	return 0, false
}

// fromImage returns the bytes a SELECT of the column returns for v, a value as the binlog images it.
func (f fit) fromImage(v any) ([]byte, bool) {
	var b []byte
	switch x := v.(type) {
	case string:
		// A view of the image's string, not a copy: the follower calls this for every row it sees written, only to
		// compare, and nothing here writes into it (asStored trims by slicing); see FromImage.
		b = unsafe.Slice(unsafe.StringData(x), len(x))
	case []byte:
		b = x
	default:
		if f.readBack != readInteger {
			return nil, false
		}
		n, ok := imageInt(v)
		if !ok || (f.unsigned && n < 0) {
			return nil, false // an unsigned column's high values arrive negative: not worth modelling
		}
		return strconv.AppendInt(nil, n, 10), true
	}
	if f.readBack == readPadded || f.readBack == readInteger {
		return nil, false // whether the image holds BINARY's padding is not modelled; integers arrive as numbers
	}
	return f.asStored(b) // text and binary come back from a SELECT as they were written, as the image holds them
}
