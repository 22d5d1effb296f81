"""What several commands share: their options and output formats (options.py), completion of option values
(completion.py), the habits a command-line tool is expected to have (habits.py), and probing the node and reading
what it should be (node_collect.py). This file imports nothing."""
