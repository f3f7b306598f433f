"""A seeded fuzzer for every transport's lifts, stream lifters, error mapping and tokenize lifts (`make fuzz`)."""
