// Print every record's key, status and text (the README's record-reading program): go run ./examples/records FILE
package main

import (
	"fmt"
	"log"
	"os"

	"modelir.dev/go/modelir"
)

func main() {
	records, err := modelir.OpenRecords(os.Args[1]) // JSON Lines or binary, sniffed from the first byte
	if err != nil {
		log.Fatal(err) // not a record file, or another IR major version
	}
	defer records.Close()
	for record, err := range records.All() {
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(record.GetKey(), record.GetStatus(), modelir.Completion{Response: record.GetResponse()}.Text())
	}
}
