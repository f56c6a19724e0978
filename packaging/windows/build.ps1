# Build the kvmon bundle and the Inno Setup installer on Windows (x64).
#   powershell -ExecutionPolicy Bypass -File packaging\windows\build.ps1
# Needs: Python with kvmon's dependencies and pyinstaller on the PATH (pip install -e ".[package]"),
# Inno Setup 6 (iscc.exe; `choco install innosetup` if missing). Writes dist\kvmon-<version>-windows-x64-setup.exe.
$ErrorActionPreference = "Stop"
$Root = Resolve-Path (Join-Path $PSScriptRoot "..\..")
Set-Location $Root

$Version = (Select-String -Path "kvmon\__init__.py" -Pattern '^__version__ = "(.+)"$').Matches[0].Groups[1].Value
Write-Host "== kvmon ${Version}: PyInstaller bundle"
python -m PyInstaller --noconfirm --clean --log-level WARN `
  --workpath build\pyinstaller --distpath build\bundle packaging\pyinstaller\kvmon.spec
if ($LASTEXITCODE -ne 0) { throw "PyInstaller failed" }

# The bundle is windowed (no console): read its exit status, not its output.
Write-Host "== self-test of the bundle"
$env:QT_QPA_PLATFORM = "offscreen"
$p = Start-Process -FilePath "build\bundle\kvmon\kvmon.exe" -ArgumentList "--self-test" -Wait -PassThru
Remove-Item Env:QT_QPA_PLATFORM
if ($p.ExitCode -ne 0) { throw "kvmon --self-test failed with exit status $($p.ExitCode)" }

Write-Host "== Inno Setup"
$iscc = (Get-Command iscc.exe -ErrorAction SilentlyContinue).Source
if (-not $iscc) { $iscc = "${env:ProgramFiles(x86)}\Inno Setup 6\ISCC.exe" }
& $iscc "/DAppVersion=$Version" packaging\windows\kvmon.iss
if ($LASTEXITCODE -ne 0) { throw "iscc failed" }
Get-ChildItem dist\kvmon-*-setup.exe
