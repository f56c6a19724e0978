; Inno Setup 6 definition of the kvmon installer for Windows (x64), over the PyInstaller one-folder bundle.
; Built by packaging\windows\build.ps1, which passes kvmon's one version number (__version__ in kvmon\__init__.py):
;   iscc /DAppVersion=<version> packaging\windows\kvmon.iss
; It expects the bundle in build\bundle\kvmon\ (relative to the repository root) and writes dist\*.exe.

#ifndef AppVersion
  #error AppVersion is not defined: build with packaging\windows\build.ps1 (it reads kvmon\__init__.py)
#endif
#define Root "..\.."

[Setup]
AppId={{6B0E6A52-3F3C-4C1B-9E43-7C1D3A9B2F10}
AppName=kvmon
AppVersion={#AppVersion}
AppVerName=kvmon {#AppVersion}
AppPublisher=kvmon developers
AppComments=Live decode speed against the memory-bandwidth ceiling, KV cache and VRAM headroom for llama-server, Ollama, vLLM and LM Studio
DefaultDirName={autopf}\kvmon
DefaultGroupName=kvmon
DisableProgramGroupPage=yes
PrivilegesRequiredOverridesAllowed=dialog
ArchitecturesAllowed=x64compatible
ArchitecturesInstallIn64BitMode=x64compatible
OutputDir={#Root}\dist
OutputBaseFilename=kvmon-{#AppVersion}-windows-x64-setup
SetupIconFile={#Root}\resources\icons\kvmon.ico
UninstallDisplayIcon={app}\kvmon.exe
Compression=lzma2
SolidCompression=yes
WizardStyle=modern

[Tasks]
Name: "desktopicon"; Description: "{cm:CreateDesktopIcon}"; GroupDescription: "{cm:AdditionalIcons}"; Flags: unchecked

[Files]
Source: "{#Root}\build\bundle\kvmon\*"; DestDir: "{app}"; Flags: ignoreversion recursesubdirs createallsubdirs

[Icons]
Name: "{autoprograms}\kvmon"; Filename: "{app}\kvmon.exe"
Name: "{autoprograms}\kvmon demo (simulated server)"; Filename: "{app}\kvmon.exe"; Parameters: "--demo"
Name: "{autodesktop}\kvmon"; Filename: "{app}\kvmon.exe"; Tasks: desktopicon

[Run]
Filename: "{app}\kvmon.exe"; Description: "{cm:LaunchProgram,kvmon}"; Flags: nowait postinstall skipifsilent
