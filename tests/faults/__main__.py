from tests.faults.census import main

main()
