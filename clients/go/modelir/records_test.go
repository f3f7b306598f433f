package modelir_test

// The record conformance vectors (clients/testdata/records, described in its make_vectors.py): every file read
// with OpenRecords and compared with manifest.json.

import (
	"encoding/base64"
	"encoding/json"
	"os"
	"path/filepath"
	"sort"
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
			if (want.IRVersion != modelir.IRVersion) != (len(records.Warnings) > 0) {
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
