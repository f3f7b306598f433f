package modelir_test

// The record conformance vectors (clients/testdata/records, described in its make_vectors.py): every file read
// with OpenRecords and compared with manifest.json.

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"modelir.dev/go/modelir"
)

type recordVector struct {
	IRVersion string `json:"irVersion"`
	Records   []struct {
		Key    string `json:"key"`
		Status int32  `json:"status"`
		Text   string `json:"text"`
	} `json:"records"`
	Skipped     int      `json:"skipped"`
	RecordBytes []string `json:"recordBytes"`
}

func TestRecordVectors(t *testing.T) {
	dir := filepath.Join("..", "..", "testdata", "records")
	raw, err := os.ReadFile(filepath.Join(dir, "manifest.json"))
	if err != nil {
		t.Fatal(err)
	}
	var manifest map[string]recordVector
	if err := json.Unmarshal(raw, &manifest); err != nil {
		t.Fatal(err)
	}
	names := make([]string, 0, len(manifest))
	for name := range manifest {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		want := manifest[name]
		t.Run(name, func(t *testing.T) {
			records, err := modelir.OpenRecords(filepath.Join(dir, name))
			if err != nil {
				t.Fatal(err)
			}
			defer records.Close()
			if records.Header.GetIrVersion() != want.IRVersion {
				t.Errorf("irVersion %s, want %s", records.Header.GetIrVersion(), want.IRVersion)
			}
			i := 0
			for record, err := range records.All() {
				if err != nil {
					t.Fatal(err)
				}
				if i >= len(want.Records) {
					t.Fatalf("more records than the manifest's %d", len(want.Records))
				}
				w := want.Records[i]
				text := ""
				if choices := record.GetResponse().GetChoices(); len(choices) > 0 {
					text = modelir.Text(choices[0])
				}
				if record.GetKey() != w.Key || int32(record.GetStatus()) != w.Status || text != w.Text {
					t.Errorf("record %d: %q %d %q, want %q %d %q", i, record.GetKey(), record.GetStatus(), text, w.Key, w.Status, w.Text)
				}
				if i < len(want.RecordBytes) {
					// Unknown fields and enum values kept: re-serialized, the record is the writer's bytes.
					got, _ := proto.MarshalOptions{Deterministic: true}.Marshal(record)
					if base64.StdEncoding.EncodeToString(got) != want.RecordBytes[i] {
						t.Errorf("record %d re-serializes to other bytes than the writer's: a field was lost", i)
					}
				}
				i++
			}
			if i != len(want.Records) || len(records.Skipped) != want.Skipped {
				t.Errorf("%d records and %d skipped (%v), want %d and %d", i, len(records.Skipped), records.Skipped, len(want.Records), want.Skipped)
			}
			// A reader warns about a file of a newer minor version only (an older one holds nothing it does not know).
			minor := func(version string) int { n, _ := strconv.Atoi(strings.Split(version, ".")[1]); return n }
			if (minor(want.IRVersion) > minor(modelir.IRVersion)) != (len(records.Warnings) > 0) {
				t.Errorf("warnings %v for IR %s", records.Warnings, want.IRVersion)
			}
		})
	}
}

func TestRecordsRefuseAnotherMajorAndANonRecordFile(t *testing.T) {
	dir := t.TempDir()
	notRecords := filepath.Join(dir, "x.jsonl")
	if err := os.WriteFile(notRecords, []byte("{\"record\": {\"key\": \"a\"}}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := modelir.OpenRecords(notRecords); err == nil {
		t.Error("a file whose first entry is not a header was accepted")
	}
	other := filepath.Join(dir, "y.jsonl")
	if err := os.WriteFile(other, []byte("{\"header\": {\"irVersion\": \"2.0.0\"}}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := modelir.OpenRecords(other); err == nil {
		t.Error("a file of IR 2.0.0 was accepted")
	}
}

// TestSpecRecordVectors reads the spec's own record vectors (conformance/records, written by the Python SDK of
// each IR release) when they are in the tree, and compares every file with its manifest entry.
func TestSpecRecordVectors(t *testing.T) {
	dir := filepath.Join("..", "..", "..", "conformance", "records")
	raw, err := os.ReadFile(filepath.Join(dir, "manifest.json"))
	if errors.Is(err, os.ErrNotExist) {
		t.Skip("no conformance/records in this tree")
	} else if err != nil {
		t.Fatal(err)
	}
	var manifest struct {
		Files []struct {
			Path        string            `json:"path"`
			Format      string            `json:"format"`
			IRVersion   string            `json:"ir_version"`
			RunMetadata map[string]string `json:"run_metadata"`
			TornBytes   int               `json:"torn_tail_bytes"`
			Records     []struct {
				Key    string `json:"key"`
				Status int32  `json:"status"`
				Text   string `json:"text"`
			} `json:"records"`
		} `json:"files"`
	}
	if err := json.Unmarshal(raw, &manifest); err != nil {
		t.Fatal(err)
	}
	for _, want := range manifest.Files {
		t.Run(want.Path, func(t *testing.T) {
			records, err := modelir.OpenRecords(filepath.Join(dir, want.Path))
			if err != nil {
				t.Fatal(err)
			}
			defer records.Close()
			if records.Format != want.Format || records.Header.GetIrVersion() != want.IRVersion {
				t.Errorf("%s IR %s, want %s IR %s", records.Format, records.Header.GetIrVersion(), want.Format, want.IRVersion)
			}
			for k, v := range want.RunMetadata {
				if records.Header.GetRunMetadata()[k] != v {
					t.Errorf("run_metadata[%s] = %q, want %q", k, records.Header.GetRunMetadata()[k], v)
				}
			}
			i := 0
			for record, err := range records.All() {
				if err != nil {
					t.Fatal(err)
				}
				text := ""
				if choices := record.GetResponse().GetChoices(); len(choices) > 0 {
					text = modelir.Text(choices[0])
				}
				// A record of an Embed call (IR 1.1) holds neither request nor response; this release reads its
				// embedding typed.
				if record.GetKey() == "embedded" {
					values := record.GetEmbedResponse().GetEmbeddings()[0].GetValues()
					if record.GetRequest() != nil || record.GetResponse() != nil || len(values) != 2 || values[0] != 0.6 || values[1] != -0.8 {
						t.Errorf("the embedding record reads as %v", record)
					}
				}
				if i < len(want.Records) {
					w := want.Records[i]
					if record.GetKey() != w.Key || int32(record.GetStatus()) != w.Status || text != w.Text {
						t.Errorf("record %d: %q %d %q, want %q %d %q", i, record.GetKey(), record.GetStatus(), text, w.Key, w.Status, w.Text)
					}
				}
				i++
			}
			torn := 0
			if want.TornBytes > 0 {
				torn = 1
			}
			if i != len(want.Records) || len(records.Skipped) != torn {
				t.Errorf("%d records, skipped %v; want %d records and %d torn", i, records.Skipped, len(want.Records), torn)
			}
		})
	}
}
