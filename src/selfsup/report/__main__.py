from selfsup.report.cli import main

main()
