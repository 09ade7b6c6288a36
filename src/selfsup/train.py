"""`python -m selfsup.train` (documented): selfsup-train, whose app lives in selfsup.run.cli."""

from selfsup.run.cli import main

if __name__ == "__main__":
    main()
