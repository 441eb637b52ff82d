from cli.main import app

app(prog_name="plimsoll")
