package router

import (
	"encoding/base64"
	"strings"
	"testing"
)

// What a read's contents may hold, against encoding/base64's own verdicts
// for the blobs, and the error that names what is wrong.
func TestCheckRead(t *testing.T) {
	for _, blob := range []string{"", "aGVsbG8=", "aGVsbG8", "aGVsbA==", "aGV/bG8=", "aGV-bG8=", "aGVsbG8==", "a===", "====", "aGVs\nbG8=", "aGVsbG8=aGVs", "aGVsbG8=\r\n", "aGVs\r\nbG8=", "=aGVsbG8", "aGVsbA=a", "aGVsbG8=="} {
		_, err := base64.StdEncoding.Strict().DecodeString(blob)
		quoted := `"` + strings.NewReplacer("\n", `\n`, "\r", `\r`).Replace(blob) + `"`
		if got, want := isBase64([]byte(quoted)), err == nil; got != want {
			t.Errorf("isBase64(%s) = %v, encoding/base64 says %v", quoted, got, want)
		}
	}
	for res, want := range map[string]string{
		`{"contents":[]}`: "",
		`{"contents":[{"uri":"a","blob":"aGV\/bG8="},{"uri":"b","text":"x"}]}`: "",
		`{"resultType":"input_required","inputRequests":{}}`:                   "",
		`{"resultType":"complete"}`:                                            "no contents array",
		`{"contents":null}`:                                                    "no contents array",
		`{"contents":{"uri":"a"}}`:                                             "no contents array",
		`{"contents":[{"uri":"a","text":"x"},{"uri":"b","blob":"x y"}]}`:       "contents[1]: blob is not base64",
		`{"contents":[{"uri":"a","blob":7}]}`:                                  "contents[0]: blob is not base64",
		`{"contents":[{"uri":"a","text":null}]}`:                               "contents[0]: text is not a string",
		`{"contents":[{"text":"x"}]}`:                                          "contents[0]: no string uri",
		`{"contents":["x"]}`:                                                   "contents[0]: not an object",
	} {
		err := checkRead([]byte(res))
		if got := ""; err != nil {
			got = err.Error()
			if got != want {
				t.Errorf("checkRead(%s) = %q, want %q", res, got, want)
			}
		} else if want != "" {
			t.Errorf("checkRead(%s) = nil, want %q", res, want)
		}
	}
}

// A blob's check is a scan: no allocation for a read of a 64 KiB blob.
func TestCheckReadAllocatesNothing(t *testing.T) {
	res := []byte(`{"contents":[{"uri":"test://b","mimeType":"image/png","blob":"` + base64.StdEncoding.EncodeToString(make([]byte, 48<<10)) + `"}],"ttlMs":1,"cacheScope":"public"}`)
	if n := testing.AllocsPerRun(100, func() { _ = checkRead(res) }); n != 0 {
		t.Errorf("checkRead allocates %.0f objects", n)
	}
}

func BenchmarkCheckRead64KiBBlob(b *testing.B) {
	res := []byte(`{"contents":[{"uri":"test://b","blob":"` + base64.StdEncoding.EncodeToString(make([]byte, 48<<10)) + `"}]}`)
	b.SetBytes(int64(len(res)))
	for b.Loop() {
		_ = checkRead(res)
	}
}

func BenchmarkIsBase64(b *testing.B) {
	v := []byte(`"` + base64.StdEncoding.EncodeToString(make([]byte, 48<<10)) + `"`)
	b.SetBytes(int64(len(v)))
	for b.Loop() {
		_ = isBase64(v)
	}
}

// BenchmarkCheckRead1KiBText is the check on the pass-through read of
// alloc_test.go: what it adds to a read filled from its upstream.
func BenchmarkCheckRead1KiBText(b *testing.B) {
	res := []byte(`{"contents":[{"uri":"test://doc","text":"` + strings.Repeat("x", 1024) + `"}],"ttlMs":60000,"cacheScope":"public","resultType":"complete"}`)
	for b.Loop() {
		_ = checkRead(res)
	}
}
