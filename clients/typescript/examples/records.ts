// Print every record's key, status and text (the README's record-reading program): npx tsx examples/records.ts FILE
import { ChoiceView, openRecords } from "../src/index";

const file = openRecords(process.argv[2]!); // JSON Lines or binary, sniffed from the first byte; throws on another major
for (const record of file.records()) {
  console.log(record.key, record.status, record.response?.choices[0] ? new ChoiceView(record.response.choices[0]).text : "");
}
