"""GG000: a file that parses (no finding expected)."""


def fine(loader):
    for x in loader:
        print(x)
