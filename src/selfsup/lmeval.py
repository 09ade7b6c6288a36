"""`python -m selfsup.lmeval tasks FOLDER` (documented) and the `_target_` of run records written before
selfsup.interop: the lm-evaluation-harness bridge lives in selfsup.interop.lmeval."""

from selfsup.interop.lmeval import LMEval, main  # noqa: F401

if __name__ == "__main__":
    main()
