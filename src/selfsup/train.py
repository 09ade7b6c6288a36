"""`python -m selfsup.train` (documented): selfsup-train, whose app lives in selfsup.run.train."""

from selfsup.run.train import main

if __name__ == "__main__":
    main()
