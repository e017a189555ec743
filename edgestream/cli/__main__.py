"""`python -m edgestream.cli ...`: the same command as `edgestream ...`."""

from edgestream.cli import main

if __name__ == "__main__":
    main()
