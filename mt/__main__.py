"""`python -m mt` runs the same CLI as the `mt` console script."""

from mt.cli import main

if __name__ == "__main__":
    main()
