// SPDX-License-Identifier: Apache-2.0

package jsonl

import (
	"bytes"
	"compress/gzip"
	"io"
	"strings"
	"testing"
)

// TestGzipRatio: a gzip stream giving far more than it takes stops past
// the floor with an error naming the ratio; a recording's does not.
func TestGzipRatio(t *testing.T) {
	var z bytes.Buffer
	zw := gzip.NewWriter(&z)
	zw.Write(bytes.Repeat([]byte(" "), 4<<20))
	zw.Close()
	open := func(ratio int64) *ratioReader {
		in := &countReader{r: bytes.NewReader(z.Bytes())}
		gz, err := gzip.NewReader(in)
		if err != nil {
			t.Fatal(err)
		}
		return &ratioReader{r: gz, in: in, ratio: ratio, floor: 1 << 20}
	}
	n, err := io.Copy(io.Discard, open(400))
	if err == nil || !strings.Contains(err.Error(), "more than the limit of 400 times the compressed size") || n > 2<<20 {
		t.Errorf("bomb: %d bytes, err %v", n, err)
	}
	if n, err := io.Copy(io.Discard, open(2000)); err != nil || n != 4<<20 {
		t.Errorf("under the ratio: %d bytes, err %v", n, err)
	}
	if 400*int64(z.Len()) > 4<<20 { // snapshot.DefaultGzipRatio
		t.Errorf("this stream's ratio %d is under the default", (4<<20)/z.Len())
	}
}
