"""The commands a message may tell a user to run, each named once: the CLI registers them under these names."""

PROGRAM = "quarantine-assets"  # the console script (pyproject.toml)
DDL = "ddl"
CREATE_TABLES = "create-tables"
UPGRADE_TABLES = "upgrade-tables"
RELEASE_CLAIM = "release-claim"
TRANSFER_CLAIM = "transfer-claim"
SPARK_SERVER = "spark-server"
FILES = "files"
REDRIVE_FILE = "redrive-file"


def command_line(command: str, *arguments: str) -> str:
    """The line a user types: the program, the command and its arguments."""
    return " ".join([PROGRAM, command, *arguments])


DDL_COMMAND = command_line(DDL)
CREATE_TABLES_COMMAND = command_line(CREATE_TABLES)
UPGRADE_TABLES_COMMAND = command_line(UPGRADE_TABLES)
RELEASE_COMMAND = command_line(RELEASE_CLAIM)
TRANSFER_COMMAND = command_line(TRANSFER_CLAIM)
SPARK_SERVER_COMMAND = command_line(SPARK_SERVER)
FILES_COMMAND = command_line(FILES)
