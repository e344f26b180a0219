from mysqlbackup.cli import main

main(prog_name="mysqlbackup")
