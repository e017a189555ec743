"""Every algorithm's name by family, importable without torch (the CLI's help texts list them).

`edgestream.sync.registry.ALGORITHMS` is where each name gets its implementation; it checks at import
that it registers exactly these names, in this order, so the two cannot drift apart.
"""

COLLECTIVE = ("ddl", "scadles", "abs-sgd", "dbs-sgd", "local-sgd", "fixed-adacomm", "adacomm")
PS = ("asp", "ssp", "dssp", "consgd", "dynsgd", "elastic-bsp", "adsp", "bsp", "fixed-adacomm-ps", "adacomm-ps")
NAMES = COLLECTIVE + PS
