"""GG000: a file that does not parse is reported; the others are still checked."""


def broken(loader):
    for x in loader  # expect: GG000
        x.backward()
