from attnsvm.cli import main

main()
