"""`metaagent-serve`: Serve a meta-agent: tasks in, designed teams out."""

from ._stub import stub


def main() -> None:
    stub("metaagent-serve", "Serve a meta-agent: tasks in, designed teams out.")


if __name__ == "__main__":
    main()
