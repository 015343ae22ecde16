// Copyright The otel-valgen Authors
// SPDX-License-Identifier: Apache-2.0

package valgenspanconnector // import "github.com/otel-valgen/otel-valgen/collector/valgenspanconnector"

import (
	"bytes"
	"encoding/base64"
	"math"
	"strconv"
	"unicode/utf8"

	"go.opentelemetry.io/collector/pdata/pcommon"
)

// appendJSON appends v as JSON (RFC 8259), for message_encoding: json. Unlike
// pcommon.Value.AsString it keeps the maps' keys in their order (a message reads role, parts,
// finish_reason; a part type first), writes no HTML escapes, and keeps a double a double: 1.0
// is written "1.0", not "1". A double that JSON cannot hold (NaN, ±Inf) and an empty value are
// null; bytes are base64, as in OTLP/JSON; invalid UTF-8 becomes U+FFFD.
func appendJSON(buf []byte, v pcommon.Value) []byte {
	switch v.Type() {
	case pcommon.ValueTypeStr:
		return appendJSONString(buf, v.Str())
	case pcommon.ValueTypeInt:
		return strconv.AppendInt(buf, v.Int(), 10)
	case pcommon.ValueTypeDouble:
		return appendJSONDouble(buf, v.Double())
	case pcommon.ValueTypeBool:
		return strconv.AppendBool(buf, v.Bool())
	case pcommon.ValueTypeBytes:
		buf = append(buf, '"')
		buf = base64.StdEncoding.AppendEncode(buf, v.Bytes().AsRaw())
		return append(buf, '"')
	case pcommon.ValueTypeMap:
		buf = append(buf, '{')
		first := true
		for k, e := range v.Map().All() {
			if !first {
				buf = append(buf, ',')
			}
			first = false
			buf = appendJSONString(buf, k)
			buf = append(buf, ':')
			buf = appendJSON(buf, e)
		}
		return append(buf, '}')
	case pcommon.ValueTypeSlice:
		buf = append(buf, '[')
		for i, e := range v.Slice().All() {
			if i > 0 {
				buf = append(buf, ',')
			}
			buf = appendJSON(buf, e)
		}
		return append(buf, ']')
	default:
		return append(buf, "null"...)
	}
}

// appendJSONDouble writes a finite double as encoding/json does (plain below 1e21 and from
// 1e-6, else with an exponent), with ".0" added to a whole number so that it reads back as a
// double.
func appendJSONDouble(buf []byte, d float64) []byte {
	if math.IsNaN(d) || math.IsInf(d, 0) {
		return append(buf, "null"...)
	}
	abs := math.Abs(d)
	if abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		return strconv.AppendFloat(buf, d, 'e', -1, 64)
	}
	start := len(buf)
	buf = strconv.AppendFloat(buf, d, 'f', -1, 64)
	if !bytes.ContainsRune(buf[start:], '.') {
		buf = append(buf, ".0"...)
	}
	return buf
}

const hexDigits = "0123456789abcdef"

// appendJSONString appends s as a JSON string: quotes, backslashes and control characters
// escaped, invalid UTF-8 as U+FFFD, everything else as it is.
func appendJSONString(buf []byte, s string) []byte {
	buf = append(buf, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			buf = append(buf, s[start:i]...)
			switch c {
			case '"', '\\':
				buf = append(buf, '\\', c)
			case '\n':
				buf = append(buf, '\\', 'n')
			case '\r':
				buf = append(buf, '\\', 'r')
			case '\t':
				buf = append(buf, '\\', 't')
			default:
				buf = append(buf, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			buf = append(buf, s[start:i]...)
			buf = append(buf, `\ufffd`...)
			i += size
			start = i
			continue
		}
		i += size
	}
	buf = append(buf, s[start:]...)
	return append(buf, '"')
}
